// The program name's directory is in an NVRTC key exactly where NVRTC's
// output can depend on it (deps/name_directory.hpp, docs/keys.md "The
// program name"): JIT users such as CuPy name every program after a fresh
// temporary directory, so the same kernel in another process must still hit.
// Each case compiles one request under two program names that differ only in
// the directory (directories that do not exist, as CuPy's are once its
// `with` block ends, unless the case needs them) with real NVRTC, and checks
// that the keys are equal exactly when the outputs are (modulo module ids,
// tests/support/nvrtc_output.hpp), and that a shared key is a real hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <string>
#include <vector>

#include "deps/name_directory.hpp"
#include "kcache/compiler.hpp"
#include "kcache/memory_store.hpp"
#include "support/nvrtc_output.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

#include <nlohmann/json.hpp>

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string what;
  std::string target;
  std::string source;
  std::vector<std::string> options;  // "-I@" stands for -I <tmp>/inc
  bool shares;                       // the directory cannot reach the output: one key
  std::string header;                // <tmp>/inc/h.h
};

const char* const k_plain = "extern \"C\" __global__ void k(int* p) { p[threadIdx.x] = 2 * __LINE__; }\n";

std::vector<Case> cases() {
  return {
      {"no include", "ptx", k_plain, {}, true, ""},
      {"no include, cubin, -D", "cubin", k_plain, {"-DOTHER=1", "-rdc=true"}, true, ""},
      {"angled include without __FILE__", "cubin",
       "#include <h.h>\nextern \"C\" __global__ void k(int* p) { p[0] = TWICE(3); }\n", {"-I@"}, true,
       "#define TWICE(x) ((x) * 2)\n#define UNUSED_HERE __FILE__\n"},
      {"__FILE__ in the source", "ptx",
       "__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = __FILE__; p[0] = 1; }\n", {},
       false, ""},
      {"__FILE__ through macros of an angled header", "ptx",
       "#include <h.h>\n__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = HERE; }\n",
       {"-I@"}, false, "#define WHERE_OF(f) f\n#define HERE WHERE_OF(__FI\\\nLE__)\n"},
      {"__FILE__ in a -D value", "ptx",
       "__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = AT; }\n", {"-DAT=__FILE__"},
       false, ""},
      {"__builtin_FILE in a default argument of an angled header", "ptx",
       "#include <h.h>\n__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = at(); }\n",
       {"-I@"}, false, "__device__ inline const char* at(const char* f = __builtin_FILE()) { return f; }\n"},
      {"NVRTC's built-in assert, no include", "ptx",
       "extern \"C\" __global__ void k(int* p) { assert(p != nullptr); p[0] = 1; }\n", {}, false, ""},
      {"-lineinfo", "ptx", k_plain, {"-lineinfo"}, false, ""},
      {"ltoir", "ltoir", k_plain, {}, false, ""},
  };
}

CompileRequest request_for(const Case& c, const fs::path& tmp, const std::string& dir) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = (tmp / dir / "kern.cu").string();
  r.source = c.source;
  r.target_kind = c.target;
  r.options = {"-arch=sm_90"};
  for (const auto& o : c.options) {
    r.options.push_back(o == "-I@" ? "-I" + (tmp / "inc").string() : o);
  }
  return r;
}

bool left_out(const KeyBuilder& kb) {
  const auto& f = kb.record().fields;
  // Left out by the static rules (an evidence key says so otherwise: test_name_evidence.cpp).
  return std::any_of(f.begin(), f.end(),
                     [](const KeyField& x) { return x.name == "name_directory" && x.value == "left out"; });
}

TEST(NameDirectory, KeyedExactlyWhereTheOutputCanDependOnIt) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const auto& c : cases()) {
    test::TempDir tmp;
    fs::create_directories(tmp.path() / "inc");
    test::write_file(tmp.path() / "inc" / "h.h", c.header);
    std::vector<Key> keys;
    std::vector<std::string> outputs;
    for (const std::string dir : {"tmpa1b2c3", "tmpz9y8x7"}) {
      const auto r = request_for(c, tmp.path(), dir);
      auto kb = derive_key(r);
      ASSERT_TRUE(kb) << c.what << ": " << kb.error().describe();
      EXPECT_EQ(left_out(*kb), c.shares) << c.what;
      keys.push_back(kb->key());
      auto a = compile_uncached(r);
      ASSERT_TRUE(a) << c.what << ": " << a.error().describe() << "\n" << a.error().log;
      if (c.target == "ltoir") {
        // Reproducible here (the module id comes from `k`); linked, a release
        // LTO-IR would not show the name it carries.
        outputs.emplace_back(a->payload);
        continue;
      }
      auto comparable = test::comparable_output(c.target, std::string(a->payload));
      ASSERT_TRUE(comparable) << c.what << ": " << comparable.error().describe();
      outputs.push_back(std::move(*comparable));
    }
    EXPECT_EQ(keys[0] == keys[1], c.shares) << c.what;
    // What makes a shared key right, and what makes keeping the directory necessary.
    EXPECT_EQ(outputs[0] == outputs[1], c.shares) << c.what << ": NVRTC's output does not behave as measured";
  }
}

TEST(NameDirectory, QuotedIncludeOfTheSourceKeepsTheDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  for (const auto& [dir, value] : {std::pair{"a", "1"}, std::pair{"b", "2"}}) {
    fs::create_directories(tmp.path() / dir);
    test::write_file(tmp.path() / dir / "q.h", std::string("#define VALUE ") + value + "\n");
  }
  std::vector<Key> keys;
  std::vector<std::string> outputs;
  for (const std::string dir : {"a", "b"}) {
    CompileRequest r;
    r.backend = "nvrtc";
    r.name = (tmp.path() / dir / "kern.cu").string();
    r.source = "#include \"q.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n";
    r.target_kind = "ptx";
    r.options = {"-arch=sm_90"};
    auto kb = derive_key(r);
    ASSERT_TRUE(kb) << kb.error().describe();
    EXPECT_FALSE(left_out(*kb));
    const auto& f = kb->record().fields;
    const auto name = std::find_if(f.begin(), f.end(), [](const KeyField& x) { return x.name == "name"; });
    ASSERT_NE(name, f.end());
    EXPECT_EQ(name->value, r.name);
    keys.push_back(kb->key());
    auto a = compile_uncached(r);
    ASSERT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
    outputs.emplace_back(a->payload);
  }
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(test::mask_module_ids(outputs[0]), test::mask_module_ids(outputs[1]));
}

// Two "processes" of a JIT user that names its programs after fresh
// temporary directories: the second compile is a hit with the first's bytes.
TEST(NameDirectory, SameKernelUnderAnotherTemporaryDirectoryHits) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  MemoryStore store(64u << 20);
  std::vector<std::string> payloads;
  for (const std::string dir : {"tmp4kq1x0", "tmpw7e2ja"}) {
    CompileRequest r;
    r.backend = "nvrtc";
    r.name = (tmp.path() / dir / "kern.cu").string();
    r.source = k_plain;
    r.target_kind = "cubin";
    r.options = {"-arch=sm_90"};
    CompileInfo info;
    auto a = compile(r, &store, &info);
    ASSERT_TRUE(a) << a.error().describe();
    EXPECT_EQ(info.hit, payloads.size() == 1) << dir;
    payloads.emplace_back(a->payload);
  }
  EXPECT_EQ(payloads[0], payloads[1]);
}

// `kcache compile <args> --json` with KCACHE_DIR=`cache`: the key, or "" on failure.
std::string cli_key(const fs::path& cache, const std::string& args) {
  const std::string cmd = "KCACHE_DIR='" + cache.string() + "' '" + KCACHE_CLI_PATH + "' compile " + args +
                          " --json 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    out.append(buf, n);
  }
  EXPECT_EQ(::pclose(p), 0) << out;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j.is_discarded() ? std::string() : j.value("key", std::string());
}

// A scan's result is shared by another kernel over the same includes (a
// family member with the same roots, deps/scan_inputs.hpp): what that
// kernel's own text does with __FILE__ must still keep the directory.
TEST(NameDirectory, AKernelSharingAnotherKernelsScanIsJudgedByItsOwnText) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  fs::create_directories(tmp.path() / "inc");
  test::write_file(tmp.path() / "inc" / "h.h", "#define TWICE(x) ((x) * 2)\n");
  const std::string include = "#include <h.h>\n__device__ const char* where;\n";
  for (const std::string dir : {"x", "y"}) {
    fs::create_directories(tmp.path() / dir);
    test::write_file(tmp.path() / dir / "a.cu", include + "extern \"C\" __global__ void k(int* p) { p[0] = TWICE(2); }\n");
    test::write_file(tmp.path() / dir / "b.cu", include + "extern \"C\" __global__ void k(int* p) { where = __FILE__; }\n");
  }
  // Headers and directories are trusted by a manifest once older than its
  // racy window (two seconds): only then is a family member's result reused.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const std::string args = " --target ptx --arch sm_90 -I '" + (tmp.path() / "inc").string() + "' -o '" +
                           (tmp.path() / "out.ptx").string() + "'";
  std::vector<std::string> keys;
  for (const std::string dir : {"x", "y"}) {
    // a.cu's scan is the family member whose result b.cu (same roots: the
    // same includes in the same directory) takes.
    ASSERT_FALSE(cli_key(cache, "'" + (tmp.path() / dir / "a.cu").string() + "'" + args).empty());
    keys.push_back(cli_key(cache, "'" + (tmp.path() / dir / "b.cu").string() + "'" + args));
    ASSERT_FALSE(keys.back().empty());
  }
  EXPECT_NE(keys[0], keys[1]) << "__FILE__ in the source: the directory must stay in the key";
}

TEST(NameDirectory, MentionsMainFileAnywhereMatchesTheTokensAcrossContinuations) {
  EXPECT_TRUE(jit::mentions_main_file_anywhere("f(__builtin_FILE())"));
  EXPECT_TRUE(jit::mentions_main_file_anywhere("f(__builtin_FI\\\nLE())"));
  EXPECT_TRUE(jit::mentions_main_file_anywhere(std::string(500, ' ') + "s\\\r\nou\\\nrce_lo\\\ncation"));
  EXPECT_FALSE(jit::mentions_main_file_anywhere("#define X a \\\n  b\\\n  __builtin_LINE"));
  EXPECT_TRUE(jit::mentions_main_file_anywhere("cuda::std::source_location l;"));
  EXPECT_TRUE(jit::mentions_main_file_anywhere("const char* b = __BASE_FILE__;"));
  EXPECT_FALSE(jit::mentions_main_file_anywhere("const char* f = __FILE__; int __builtin_LINE;"));
}

// The one-pass search (deps/name_directory.cpp) against four plain
// searches: each token at every offset of text made of the tokens' own
// characters (what its skip table reads), whole and split by a
// backslash-newline at every place; and near-misses (each token less one
// character) never match.
TEST(NameDirectory, MentionsMainFileAnywhereFindsEachTokenAtEveryOffsetAndSplit) {
  const std::vector<std::string> tokens = {"__builtin_FILE", "__builtin_source_location", "source_location",
                                           "__BASE_FILE__"};
  const auto reference = [&](std::string t) {
    for (std::size_t at = t.find('\\'); at != std::string::npos; at = t.find('\\', at)) {
      if (t.compare(at, 2, "\\\n") == 0) {
        t.erase(at, 2);
      } else if (t.compare(at, 3, "\\\r\n") == 0) {
        t.erase(at, 3);
      } else {
        ++at;
      }
    }
    return std::any_of(tokens.begin(), tokens.end(), [&](const std::string& k) { return t.find(k) != std::string::npos; });
  };
  const std::string filler = "_E_IL_FIsource_locatBASE__builtin_at_ion__";
  int checked = 0;
  for (const auto& token : tokens) {
    for (std::size_t offset = 0; offset < 40; ++offset) {
      const std::string before = filler.substr(0, offset % filler.size());
      const std::string text = before + token + filler.substr(offset % 7);
      EXPECT_TRUE(jit::mentions_main_file_anywhere(text)) << text;
      for (std::size_t split = 1; split < token.size(); ++split) {
        for (const std::string cont : {"\\\n", "\\\r\n"}) {
          const std::string joined = before + token.substr(0, split) + cont + token.substr(split) + filler.substr(offset % 5);
          EXPECT_TRUE(jit::mentions_main_file_anywhere(joined)) << joined;
          ++checked;
        }
      }
      for (std::size_t drop = 0; drop < token.size(); ++drop) {
        std::string near = token;
        near.erase(drop, 1);
        const std::string text2 = before + near + filler.substr(offset % 3);
        EXPECT_EQ(jit::mentions_main_file_anywhere(text2), reference(text2)) << text2;
        ++checked;
      }
    }
  }
  // Pseudo-random text over the tokens' characters: the same answer as the reference.
  std::uint32_t seed = 12345;
  const std::string alphabet = "_EILFBASsourcelatinbu\\\n";
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    const std::size_t n = 8 + round % 60;
    for (std::size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      text += alphabet[(seed >> 16) % alphabet.size()];
    }
    if (round % 3 == 0) {
      text.insert((seed >> 8) % (text.size() + 1), tokens[round % tokens.size()]);
    }
    ASSERT_EQ(jit::mentions_main_file_anywhere(text), reference(text)) << text;
    ++checked;
  }
  EXPECT_GT(checked, 20000);
}

TEST(NameDirectory, CheckFollowsMacrosToAFixedPoint) {
  jit::FileDirectives header;
  header.defines = {{"A", true, "x", "B(x)"}, {"B", true, "y", "C"}, {"C", false, "", "__FILE__"},
                    {"D", false, "", "1"}, {"H", false, "", "SRC"}};
  jit::NameDirectoryCheck check;
  check.add_header("/inc/h.h", header);
  ASSERT_EQ(check.because(), "");
  const auto macros = check.file_macros();
  EXPECT_EQ(macros, (std::vector<std::string>{"A", "B", "C"}));
  using Kind = jit::NameDirectoryClass;
  auto kind = [&](std::string_view source, std::vector<std::string> defines = {}) {
    return jit::name_directory_verdict(source, defines, "", "", macros).kind;
  };
  EXPECT_EQ(kind("int x = D;"), Kind::cannot_matter);
  EXPECT_EQ(kind("int x = A(1);"), Kind::matters);
  EXPECT_EQ(kind("int x = E;", {"E=A(2)"}), Kind::matters);
  EXPECT_EQ(kind("int x = 1;", {"E=__FILE__"}), Kind::matters) << "a -D macro may be named by a header's macro";
  EXPECT_EQ(kind("int x = E;", {"E=D"}), Kind::cannot_matter);
  EXPECT_EQ(kind("#define SRC __FI\\\nLE__\nint x = H;"), Kind::matters) << "a header macro may name the source's";
  // Only evidence decides these (deps/name_directory.hpp, `may_matter`).
  EXPECT_EQ(kind("const char* f = __builtin_FILE();"), Kind::may_matter);
  EXPECT_EQ(kind("#define CAT(a, b) a##b\nint x = CAT(__FI, LE__);"), Kind::may_matter) << "issue 39 item 5";
  EXPECT_EQ(kind("int x = CAT(ass, ert);", {"CAT(a,b)=a##b"}), Kind::may_matter);
  EXPECT_EQ(kind("int x = 1;", {"W=__builtin_FILE()"}), Kind::may_matter);
  // What surely matters wins over a doubt.
  EXPECT_EQ(kind("#define CAT(a, b) a##b\nconst char* f = __FILE__;"), Kind::matters);
  EXPECT_EQ(jit::name_directory_verdict("int x;", {}, "the closure", "", {}).kind, Kind::matters);
  EXPECT_EQ(jit::name_directory_verdict("int x = __FILE__;", {}, "", "a doubt", {}).kind, Kind::matters);
  const auto doubted = jit::name_directory_verdict("int x;", {}, "", "a doubt", {});
  EXPECT_EQ(doubted.kind, Kind::may_matter);
  EXPECT_EQ(doubted.because, "a doubt");

  jit::FileDirectives pasting;
  pasting.defines = {{"CAT", true, "a,b", "a##b"}};
  jit::NameDirectoryCheck pasted;
  pasted.add_header("/inc/cat.h", pasting);
  EXPECT_EQ(pasted.because(), "");
  EXPECT_NE(pasted.doubt().find("pastes tokens"), std::string::npos) << pasted.doubt();
  jit::FileDirectives loc;
  loc.names_main_file = true;
  jit::NameDirectoryCheck located;
  located.add_header("/inc/loc.h", loc);
  EXPECT_EQ(located.because(), "");
  EXPECT_NE(located.doubt(), "");

  jit::NameDirectoryCheck quoted;
  quoted.add_source(jit::scan_file("#include \"q.h\"\n"));
  EXPECT_NE(quoted.because(), "");
  jit::NameDirectoryCheck angled;
  angled.add_source(jit::scan_file("#include <q.h>\n"));
  EXPECT_EQ(angled.because(), "");
}

}  // namespace
}  // namespace kcache
