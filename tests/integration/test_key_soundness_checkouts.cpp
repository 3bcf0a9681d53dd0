// Sharing across checkouts (`base_dir`, docs/keys.md): two copies of one
// project at different absolute paths, built by the real `kcache compile`
// with absolute paths and one cache. Where the output holds no path, the
// second checkout hits the first's entry and gets the bytes its own fresh
// compile gives; where it can (__FILE__, assert, -lineinfo, -G, LTO-IR, a
// macro from -D that kcache cannot see), it compiles its own, whose bytes name
// its own path.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class KeySoundnessCheckouts : public test::CliShell {
protected:
  struct Result {
    bool hit = false;
    bool cacheable = false;
    std::string key;
    std::string base_dir_field;  // the key record's base_dir field, "" when absent
    std::string reason;
    std::string bytes;
  };

  void write_checkout(const std::string& name, const std::string& source, const std::string& header) {
    const fs::path ck = root() / name;
    fs::create_directories(ck / "src");
    fs::create_directories(ck / "include");
    test::write_file(ck / "src" / "k.cu", source);
    test::write_file(ck / "include" / "h.h", header);
  }

  // Compiles checkout `name`'s src/k.cu by absolute path, -I by absolute path,
  // with base_dir = the checkout (unless `base_dir` is false).
  Result compile(const std::string& name, const std::string& args, bool base_dir = true, bool cached = true) {
    const fs::path ck = root() / name;
    const fs::path out = ck / (cached ? "out" : "fresh");
    const std::string env = base_dir ? "KCACHE_BASE_DIR='" + ck.string() + "' " : "";
    const auto r = sh(env + "\"$K\" compile '" + (ck / "src/k.cu").string() + "' -I '" + (ck / "include").string() +
                      "' " + args + " --json -o '" + out.string() + "'" + (cached ? "" : " --no-cache"));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    Result res;
    res.bytes = test::read_file(out);
    if (r.rc != 0) {
      return res;
    }
    const auto j = nlohmann::json::parse(r.out);
    res.hit = j["hit"].get<bool>();
    res.cacheable = j["cacheable"].get<bool>();
    res.key = j["key"].get<std::string>();
    res.reason = j.value("not_cacheable_reason", "");
    for (const auto& f : j["passport"]["key_record"]["fields"]) {
      if (f["name"] == "base_dir") {
        res.base_dir_field = f["value"].get<std::string>();
      }
    }
    return res;
  }

  // Both checkouts; returns B's result after A stored its entry, and checks
  // B's bytes equal B's own fresh compile.
  Result second_checkout(const std::string& source, const std::string& header, const std::string& args,
                         Result* first = nullptr) {
    write_checkout("ckA", source, header);
    write_checkout("ckB_at_another_path", source, header);
    const Result a = compile("ckA", args);
    EXPECT_FALSE(a.hit);
    EXPECT_TRUE(a.cacheable) << a.reason;
    if (first != nullptr) {
      *first = a;
    }
    Result b = compile("ckB_at_another_path", args);
    const Result fresh = compile("ckB_at_another_path", args, true, false);
    EXPECT_EQ(b.bytes, fresh.bytes) << args << ": checkout B got other bytes than its own fresh compile (a stale hit)";
    return b;
  }
};

const std::string k_header = "__device__ inline int twice(int x) { return 2 * x; }\n";
const std::string k_plain = "#include \"h.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = twice(p[1]); }\n";

TEST_F(KeySoundnessCheckouts, ReleaseBuildsShareAcrossCheckouts) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const std::string args : {"--target ptx --arch sm_90", "--target cubin --arch sm_90a"}) {
    Result a;
    const Result b = second_checkout(k_plain, k_header, args, &a);
    EXPECT_TRUE(b.hit) << args << ": the second checkout must hit the first's entry";
    EXPECT_EQ(b.key, a.key);
    EXPECT_EQ(b.bytes, a.bytes);
    EXPECT_EQ(b.base_dir_field, "relative");
    EXPECT_EQ(b.bytes.find(root().string()), std::string::npos) << "the output names no path";
    fs::remove_all(root() / "ckA");
    fs::remove_all(root() / "ckB_at_another_path");
  }
}

TEST_F(KeySoundnessCheckouts, WithoutBaseDirCheckoutsDoNotShare) {
  KCACHE_REQUIRE_TOOLKIT();
  write_checkout("ckA", k_plain, k_header);
  write_checkout("ckB", k_plain, k_header);
  const Result a = compile("ckA", "--target ptx --arch sm_90", false);
  const Result b = compile("ckB", "--target ptx --arch sm_90", false);
  EXPECT_FALSE(b.hit);
  EXPECT_NE(a.key, b.key);
  EXPECT_EQ(a.bytes, b.bytes) << "the same bytes, but the keys name the paths";
  EXPECT_EQ(b.base_dir_field, "");
}

// Each way a path reaches the output: no sharing, each checkout's bytes name its own path.
TEST_F(KeySoundnessCheckouts, OutputsThatNameAPathAreNotShared) {
  KCACHE_REQUIRE_TOOLKIT();
  struct Case {
    std::string what, source, header, args, reason;
  };
  const std::string use_file =
      "#include \"h.h\"\nextern \"C\" __global__ void k(const char** p) { p[0] = __FILE__; }\n";
  const std::string header_assert =
      "#include <cuda/std/cassert>\n__device__ inline int twice(int x) { assert(x > 0); return 2 * x; }\n";
  const std::string cccl = " -I '" + (Toolkit::instance().cuda_home() / "include" / "cccl").string() + "'";
  const std::vector<Case> cases = {
      {"__FILE__ in the source", use_file, k_header, "--target ptx --arch sm_90", "src/k.cu uses __FILE__"},
      {"assert in a header", k_plain, header_assert, "--target ptx --arch sm_90" + cccl, "include/h.h uses assert"},
      {"-lineinfo", k_plain, k_header, "--target ptx --arch sm_90 -X -lineinfo", "--generate-line-info"},
      {"-G", k_plain, k_header, "--target cubin --arch sm_90 -X -G", "--device-debug"},
      {"ltoir", k_plain, k_header, "--target ltoir --arch sm_90", "LTO-IR"},
  };
  for (const auto& c : cases) {
    Result a;
    const Result b = second_checkout(c.source, c.header, c.args, &a);
    EXPECT_FALSE(b.hit) << c.what;
    EXPECT_NE(a.key, b.key) << c.what;
    EXPECT_EQ(b.base_dir_field.rfind("absolute: ", 0), 0u) << c.what << ": " << b.base_dir_field;
    EXPECT_NE(b.base_dir_field.find(c.reason), std::string::npos) << c.what << ": " << b.base_dir_field;
    if (c.args.find("ltoir") == std::string::npos && c.args.find("-G") == std::string::npos) {
      // Text: the path is in it as text (.file) or as PTX's decimal byte list.
      EXPECT_NE(a.bytes, b.bytes) << c.what << ": the outputs name their own checkout";
    }
    // why-miss names the refusal.
    const auto why = sh("\"$K\" why-miss " + a.key + " " + b.key);
    EXPECT_NE(why.out.find("A keeps absolute paths (base_dir): "), std::string::npos) << why.out << why.err;
    EXPECT_NE(why.out.find(c.reason), std::string::npos) << why.out;
    fs::remove_all(root() / "ckA");
    fs::remove_all(root() / "ckB_at_another_path");
  }
}

// A path that reaches the output through a macro kcache cannot see (a -D
// value naming __FILE__): the output check refuses to store it, and the next
// compile keys it with absolute paths, cached from then on.
TEST_F(KeySoundnessCheckouts, OutputThatNamesTheCheckoutIsNeverSharedEvenUnseen) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string source = "#include \"h.h\"\nextern \"C\" __global__ void k(const char** p) { p[0] = WHERE; }\n";
  write_checkout("ckA", source, k_header);
  write_checkout("ckB", source, k_header);
  const std::string args = "--target ptx --arch sm_90 -D WHERE=__FILE__";
  const Result first = compile("ckA", args);
  EXPECT_FALSE(first.cacheable);
  EXPECT_NE(first.reason.find("names a path under base_dir"), std::string::npos) << first.reason;
  const Result second = compile("ckA", args);
  EXPECT_FALSE(second.hit);
  EXPECT_TRUE(second.cacheable) << second.reason;
  EXPECT_EQ(second.base_dir_field, "absolute: the output names a path under base_dir");
  EXPECT_TRUE(compile("ckA", args).hit);
  const Result b = compile("ckB", args);
  EXPECT_FALSE(b.hit) << "B must not get A's path";
  const Result b_fresh = compile("ckB", args, true, false);
  EXPECT_EQ(b.bytes, b_fresh.bytes);
  EXPECT_NE(b.bytes, second.bytes);
}

}  // namespace
}  // namespace kcache
