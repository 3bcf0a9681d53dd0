// What a new cache directory takes from the user's memos (deps/user_memo.hpp):
// NVRTC's predefined answers, the toolkit's include names, directory listings
// and a copy of the header manifests and families. Each is trusted only under
// what makes it true: another toolkit identity asks NVRTC again, a damaged or
// planted file is ignored, an edited header is read again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "compile/backends.hpp"
#include "deps/header_scanner.hpp"
#include "deps/predefined_macros.hpp"
#include "deps/toolkit_includes.hpp"
#include "kcache/compiler.hpp"
#include "kcache/toolkit.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

// Identities younger than the racy window (2 s) are never trusted.
void age() { std::this_thread::sleep_for(std::chrono::milliseconds(2100)); }

// Files directly in `dir` whose name starts with `prefix`.
std::vector<fs::path> files_named(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(prefix, 0) == 0) {
      out.push_back(it->path());
    }
  }
  return out;
}

// Manifests (64-hex names) anywhere under `dir`.
std::size_t manifests_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    n += it->is_regular_file() && it->path().filename().string().size() == 64 ? 1 : 0;
  }
  return n;
}

// ---- scans: the user's copy of manifests and families (no toolkit needed) ----

class ScanFamilyPerUser : public ::testing::Test {
protected:
  void SetUp() override {
    inc = (tmp.path() / "inc").string();
    fs::create_directories(inc);
    test::write_file(inc + "/a.h", "#include \"b.h\"\n#define A 1\n");
    test::write_file(inc + "/b.h", "#define B 1\n");
    user = tmp.path() / "user";
    age();
  }

  // One scan as a new process whose cache directory is `cache` ("" : no memo at all).
  Result<ScanResult> scan(const std::string& cache, const std::string& body) {
    forget_scan_memos();
    ScanInput in;
    const std::string source = "#include <a.h>\n" + body;
    in.source = source;
    in.program_name = (tmp.path() / "k.cu").string();
    in.include_dirs = {inc};
    if (!cache.empty()) {
      in.memo_dir = tmp.path() / cache / "v1" / "headers";
      in.user_memo_dir = user;
    }
    return scan_headers(in);
  }

  test::TempDir tmp;
  std::string inc;
  fs::path user;
};

TEST_F(ScanFamilyPerUser, ANewCacheDirectoryTakesTheUsersScanAndAnEditedHeaderIsReadAgain) {
  const auto first = scan("cache-a", "int k1;\n");
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->reused);
  EXPECT_GT(manifests_in(tmp.path() / "cache-a"), 0u);
  EXPECT_GT(manifests_in(user / "headers"), 0u) << "the walk's manifest is kept for the user too";
  EXPECT_FALSE(files_named(user, "listings").empty()) << "listings are kept per user";

  // A new cache directory: the user's family member still applies, no walk.
  const auto fresh = scan("cache-b", "int k2;\n");
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(fresh->reused);
  EXPECT_EQ(fresh->headers, first->headers);
  EXPECT_EQ(manifests_in(tmp.path() / "cache-b"), 0u) << "a reuse writes no manifest";

  // An edited header (same size: only its identity tells): read again in
  // another new cache directory, and the result is what a scan without any
  // memo finds.
  test::write_file(inc + "/b.h", "#define B 2\n");
  const auto edited = scan("cache-c", "int k3;\n");
  ASSERT_TRUE(edited);
  EXPECT_FALSE(edited->reused);
  const auto bare = scan("", "int k3;\n");
  ASSERT_TRUE(bare);
  EXPECT_EQ(edited->headers, bare->headers);
  ASSERT_EQ(edited->headers.size(), 2u);
  EXPECT_NE(edited->headers[1].sha256, first->headers[1].sha256) << "b.h's new bytes are keyed";

  // Damaged user copies (cut in half) are ignored: the answer stays right.
  age();
  for (const auto& e : fs::recursive_directory_iterator(user / "headers")) {
    if (e.is_regular_file()) {
      const std::string text = test::read_file(e.path().string());
      test::write_file(e.path().string(), text.substr(0, text.size() / 2));
    }
  }
  const auto healed = scan("cache-d", "int k4;\n");
  ASSERT_TRUE(healed);
  EXPECT_FALSE(healed->reused);
  EXPECT_EQ(healed->headers, bare->headers);
  const auto after = scan("cache-e", "int k5;\n");
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->reused) << "the damaged copies were replaced";
  EXPECT_EQ(after->headers, bare->headers);
}

// ---- NVRTC's predefined macros, asked once per user and toolkit ----

class PredefinedUserMemo : public ::testing::Test {
protected:
  void SetUp() override {
    m_saved_dir = Toolkit::instance().memo_dir();
    user = tmp.path() / "user" / "kcache-toolkit";
    Toolkit::instance().set_memo_file(user / "memo");
  }
  void TearDown() override {
    Toolkit::instance().set_memo_file(std::nullopt);
    Toolkit::instance().set_memo_dir(m_saved_dir);
    forget_scan_memos();
    forget_predefined_answers();
  }

  // derive_key() as a new process with cache directory `cache` ("": no memo at all).
  std::string key_in(const std::string& cache, std::vector<HeaderDependency>* headers = nullptr) {
    forget_scan_memos();
    forget_predefined_answers();
    forget_toolkit_includes();  // another test in this process may have scanned the toolkit already
    Toolkit::instance().set_memo_dir(cache.empty() ? fs::path() : tmp.path() / cache / "v1" / "toolkit");
    CompileRequest r;
    r.backend = "nvrtc";
    r.target_kind = "ptx";
    r.name = (tmp.path() / "src" / "k.cu").string();
    r.source =
        "#define CAT2(a, b) a##b\n#define CAT(a, b) CAT2(a, b)\n#define STR2(x) #x\n#define STR(x) STR2(x)\n"
        "#include STR(CAT(ver, __CUDACC_VER_MAJOR__).h)\nextern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n";
    r.options = {"-arch=sm_90"};
    auto k = derive_key(r, headers);
    EXPECT_TRUE(k) << k.error().describe();
    return k ? k->key().hex() : std::string();
  }

  // The context of `options` for the loaded NVRTC, under another library identity when `identity` is set.
  PredefinedContext context(const std::string& identity = {}) {
    auto id = Toolkit::instance().identify(ToolkitLibrary::nvrtc);
    auto fp = Toolkit::instance().headers_fingerprint();
    EXPECT_TRUE(id && fp);
    return predefined_context(identity.empty() ? id->version + "\n" + id->build_id : identity, fp ? *fp : "",
                              {"--gpu-architecture=sm_90"}, run_nvrtc_probe, user, tmp.path() / "cache" / "v1" / "headers");
  }

  test::TempDir tmp;
  fs::path user;
  fs::path m_saved_dir;
};

TEST_F(PredefinedUserMemo, ANewCacheDirectoryNeitherProbesNorReadsAnEditedHeaderStale) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto version = Toolkit::instance().identify(ToolkitLibrary::nvrtc)->version;
  const std::string header = (tmp.path() / "src" / ("ver" + version.substr(0, version.find('.')) + ".h")).string();
  fs::create_directories(tmp.path() / "src");
  test::write_file(header, "#define VALUE 1\n");
  age();

  const auto probes = predefined_probe_count();
  std::vector<HeaderDependency> headers;
  const auto first = key_in("cache-a", &headers);
  ASSERT_EQ(headers.size(), 1u);
  EXPECT_EQ(headers[0].path, header);
  EXPECT_EQ(predefined_probe_count(), probes + 1) << "the first use asks NVRTC";
  EXPECT_EQ(files_named(user, "predefined-").size(), 1u);
  EXPECT_EQ(files_named(user, "toolkit-").size(), 1u) << "the toolkit's include names are kept per user";
  EXPECT_TRUE(files_named(tmp.path() / "cache-a" / "v1" / "headers", "predefined-").empty());
  EXPECT_TRUE(files_named(tmp.path() / "cache-a" / "v1" / "headers", "toolkit-").empty());

  // A new cache directory of the same user: no probe, same key.
  EXPECT_EQ(key_in("cache-b"), first);
  EXPECT_EQ(predefined_probe_count(), probes + 1) << "a new cache directory must not run the probe again";

  // The header NVRTC reads is edited: a new cache directory keys the new
  // bytes, as a derivation without any memo does (no stale hit).
  test::write_file(header, "#define VALUE 2\n");
  const auto edited = key_in("cache-c");
  EXPECT_NE(edited, first);
  EXPECT_EQ(edited, key_in(""));
  EXPECT_EQ(predefined_probe_count(), probes + 2) << "only the run without any memo asks NVRTC";
}

// Identifiers found round after round (each computed include reached only
// through the one before) are asked with one probe at the fixed point, and
// an answer that defines one (the version) continues the scan from there.
TEST_F(PredefinedUserMemo, OneProbeAnswersEveryRoundOfAScan) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto version = Toolkit::instance().identify(ToolkitLibrary::nvrtc)->version;
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  const std::string str = "#define STR2(x) #x\n#define STR(x) STR2(x)\n#define CAT2(a, b) a##b\n#define CAT(a, b) CAT2(a, b)\n";
  test::write_file((src / "__KC_A__.h").string(), str + "#include STR(__KC_B__.h)\n");
  test::write_file((src / "__KC_B__.h").string(), str + "#include STR(CAT(ver, __CUDACC_VER_MAJOR__).h)\n");
  test::write_file((src / ("ver" + version.substr(0, version.find('.')) + ".h")).string(), "#define VALUE 1\n");
  forget_scan_memos();
  forget_predefined_answers();
  Toolkit::instance().set_memo_dir(tmp.path() / "cache" / "v1" / "toolkit");
  CompileRequest r;
  r.backend = "nvrtc";
  r.target_kind = "ptx";
  r.name = (src / "k.cu").string();
  r.source = str + "#include STR(__KC_A__.h)\nextern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n";
  r.options = {"-arch=sm_90"};
  const auto probes = predefined_probe_count();
  std::vector<HeaderDependency> headers;
  auto key = derive_key(r, &headers);
  ASSERT_TRUE(key) << key.error().describe();
  EXPECT_EQ(predefined_probe_count(), probes + 1) << "one probe for the three rounds";
  std::vector<std::string> names;
  for (const auto& h : headers) {
    names.push_back(fs::path(h.path).filename().string());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"__KC_A__.h", "__KC_B__.h", "ver" + version.substr(0, version.find('.')) + ".h"}));
  // NVRTC reads exactly those: the kernel compiles.
  auto out = compile(r, nullptr);
  EXPECT_TRUE(out) << (out ? "" : out.error().describe() + "\n" + out.error().log);
}

TEST_F(PredefinedUserMemo, AnotherToolkitIdentityOrADamagedOrPlantedMemoIsNotTrusted) {
  KCACHE_REQUIRE_TOOLKIT();
  forget_predefined_answers();
  const auto probes = predefined_probe_count();
  auto ask = [&](const PredefinedContext& c) {
    forget_predefined_answers();  // a new process
    auto a = ask_predefined(c, {"__CUDA_ARCH__"});
    EXPECT_TRUE(a) << a.error().describe();
    return a ? a->at("__CUDA_ARCH__").value : std::string();
  };
  const auto real = context();
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 1);
  const auto files = files_named(user, "predefined-");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 1) << "answered from the user's memo";

  // Another library identity (a rebuilt or upgraded NVRTC): its own context, asked again.
  EXPECT_NE(context("13.0\nsome-other-build-id").id, real.id);
  EXPECT_EQ(ask(context("13.0\nsome-other-build-id")), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 2);

  // Damaged: ignored, asked again, replaced.
  test::write_file(files[0].string(), "kcache-predefined 1\nD __CUDA_ARCH__ 800");
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 3);
  EXPECT_EQ(test::read_file(files[0].string()), "kcache-predefined 1\nD __CUDA_ARCH__ 900\n");

  // Planted as a symlink to a file that lies: never followed.
  test::write_file((tmp.path() / "lie").string(), "kcache-predefined 1\nD __CUDA_ARCH__ 800\n");
  fs::remove(files[0]);
  fs::create_symlink(tmp.path() / "lie", files[0]);
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 4);
  EXPECT_FALSE(fs::is_symlink(files[0])) << "replaced by a real file";

  // The user's directory cannot be written: the cache directory's keeps the answers.
  fs::remove_all(tmp.path() / "user");
  test::write_file((tmp.path() / "user").string(), "not a directory\n");
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 5);
  EXPECT_EQ(files_named(tmp.path() / "cache" / "v1" / "headers", "predefined-").size(), 1u);
  EXPECT_EQ(ask(real), "900");
  EXPECT_EQ(predefined_probe_count(), probes + 5) << "read back from the fallback";
}

}  // namespace
}  // namespace kcache::jit
