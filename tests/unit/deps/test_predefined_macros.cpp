// What NVRTC predefines, asked of the real NVRTC (deps/predefined_macros.hpp),
// and computed includes that name a header through each of those macros
// (deps/header_scanner.hpp): the header NVRTC reads must be in the key, per
// arch, per -std and per option that changes the predefined macros.
#include "deps/predefined_macros.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "compile/backends.hpp"
#include "deps/header_scanner.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/compiler.hpp"
#include "kcache/program.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;
using Kind = PredefinedAnswer::Kind;

// The macros the NVRTC and nvcc guides document (and EDG's standard ones).
const std::vector<std::string> k_documented = {
    "__CUDACC__",           "__CUDACC_RTC__",         "__CUDACC_VER_MAJOR__",         "__CUDACC_VER_MINOR__",
    "__CUDACC_VER_BUILD__", "__CUDA_ARCH__",          "__CUDA_ARCH_LIST__",           "__CUDA_ARCH_SPECIFIC__",
    "__CUDA_ARCH_FAMILY_SPECIFIC__", "__CUDA_ARCH_FEAT_SM90_ALL", "__CUDA_ARCH_FEAT_SM100_ALL",
    "__CUDACC_RDC__",       "__CUDACC_EWP__",         "__CUDACC_DEBUG__",             "__CUDACC_RTC_INT128__",
    "__CUDACC_RTC_FLOAT128__", "__CUDACC_RTC_MINIMAL__", "__CUDACC_RELAXED_CONSTEXPR__", "__CUDACC_EXTENDED_LAMBDA__",
    "__NVCC__",             "__NVCC_DIAG_PRAGMA_SUPPORT__", "__CUDA_FTZ",              "__CUDA_PREC_DIV",
    "__CUDA_PREC_SQRT",     "__cplusplus",            "NULL",                         "va_start",
    "va_end",               "va_arg",                 "va_copy",                      "__CUDACC_DEVICE_ATOMIC_BUILTINS__"};

Result<std::map<std::string, PredefinedAnswer>> ask(const std::vector<std::string>& options,
                                                    const std::vector<std::string>& names = k_documented,
                                                    const fs::path& memo = {}) {
  auto id = Toolkit::instance().identify(ToolkitLibrary::nvrtc);
  auto fp = Toolkit::instance().headers_fingerprint();
  if (!id || !fp) {
    return make_error(ErrorCode::toolkit_missing, "no toolkit");
  }
  const auto context = predefined_context(id->version + "\n" + id->build_id, *fp, options, run_nvrtc_probe, memo);
  return ask_predefined(context, names);
}

std::string value(const std::map<std::string, PredefinedAnswer>& a, const std::string& name) {
  const auto& x = a.at(name);
  return x.kind == Kind::object_like ? x.value : x.kind == Kind::undefined ? "<undefined>" : "<other>";
}

std::string nvrtc_major() {
  const auto v = Toolkit::instance().identify(ToolkitLibrary::nvrtc)->version;
  return v.substr(0, v.find('.'));
}

TEST(PredefinedMacros, ArchMacrosFollowTheArch) {
  KCACHE_REQUIRE_TOOLKIT();
  struct Case {
    std::string arch, cuda_arch, feat90, specific;
  };
  for (const auto& c : {Case{"sm_80", "800", "<undefined>", "<undefined>"},
                        Case{"sm_90", "900", "<undefined>", "<undefined>"},
                        Case{"sm_90a", "900", "1", "900"},
                        Case{"compute_90", "900", "<undefined>", "<undefined>"},
                        Case{"sm_100a", "1000", "<undefined>", "1000"}}) {
    forget_predefined_answers();
    auto a = ask({"--gpu-architecture=" + c.arch});
    ASSERT_TRUE(a) << c.arch << ": " << a.error().describe() << "\n" << a.error().log;
    EXPECT_EQ(value(*a, "__CUDA_ARCH__"), c.cuda_arch) << c.arch;
    EXPECT_EQ(value(*a, "__CUDA_ARCH_LIST__"), c.cuda_arch) << c.arch;
    EXPECT_EQ(value(*a, "__CUDA_ARCH_FEAT_SM90_ALL"), c.feat90) << c.arch;
    EXPECT_EQ(value(*a, "__CUDA_ARCH_SPECIFIC__"), c.specific) << c.arch;
    EXPECT_EQ(value(*a, "__CUDACC_VER_MAJOR__"), nvrtc_major()) << c.arch;
    EXPECT_EQ(value(*a, "__CUDACC_RTC__"), "1") << c.arch;
    EXPECT_EQ(value(*a, "__CUDACC__"), "1") << c.arch;
    EXPECT_EQ(value(*a, "__NVCC__"), "<undefined>") << c.arch;
    // Function-like: kcache cannot use them as definitions (a computed
    // include that uses one is not cacheable, below).
    for (const char* f : {"va_start", "va_end", "va_arg", "va_copy"}) {
      EXPECT_EQ(value(*a, f), "<other>") << c.arch << " " << f;
    }
  }
}

TEST(PredefinedMacros, CplusplusFollowsStd) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"c++03", "199711L"}, {"c++11", "201103L"}, {"c++14", "201402L"}, {"c++17", "201703L"}, {"c++20", "202002L"}};
  for (const auto& [std_, expected] : cases) {
    auto a = ask({"--gpu-architecture=sm_90", "--std=" + std_});
    ASSERT_TRUE(a) << std_ << ": " << a.error().describe() << "\n" << a.error().log;
    EXPECT_EQ(value(*a, "__cplusplus"), expected) << std_;
  }
  auto a = ask({"--gpu-architecture=sm_90"});
  ASSERT_TRUE(a);
  EXPECT_EQ(value(*a, "__cplusplus"), "201703L") << "NVRTC 13's default";
}

TEST(PredefinedMacros, OptionsThatChangeMacros) {
  KCACHE_REQUIRE_TOOLKIT();
  auto plain = ask({"--gpu-architecture=sm_90"});
  ASSERT_TRUE(plain);
  struct Case {
    std::string option, macro, with;
  };
  for (const auto& c : {Case{"--relocatable-device-code=true", "__CUDACC_RDC__", "1"},
                        Case{"--extensible-whole-program", "__CUDACC_EWP__", "1"},
                        Case{"--device-debug", "__CUDACC_DEBUG__", "1"},
                        Case{"--device-int128", "__CUDACC_RTC_INT128__", "1"},
                        Case{"--use_fast_math", "__CUDA_FTZ", "1"},
                        Case{"--use_fast_math", "__CUDA_PREC_DIV", "0"},
                        Case{"--ftz=true", "__CUDA_FTZ", "1"},
                        Case{"--prec-sqrt=false", "__CUDA_PREC_SQRT", "0"},
                        Case{"--dlink-time-opt", "__CUDACC_RDC__", "1"}}) {
    auto a = ask({"--gpu-architecture=sm_90", c.option});
    ASSERT_TRUE(a) << c.option << ": " << a.error().describe() << "\n" << a.error().log;
    EXPECT_EQ(value(*a, c.macro), c.with) << c.option;
    EXPECT_NE(value(*plain, c.macro), c.with) << c.option << " must be what changes " << c.macro;
  }
  // -D, -I and diagnostics options do not change what NVRTC predefines: one context.
  const auto a = predefined_context("x", "y", {"--gpu-architecture=sm_90"}, run_nvrtc_probe, {});
  const auto b = predefined_context("x", "y", {"--gpu-architecture=sm_90", "--define-macro=A=1",
                                               "--include-path=/x", "--disable-warnings"},
                                        run_nvrtc_probe, {});
  const auto c = predefined_context("x", "y", {"--gpu-architecture=sm_80"}, run_nvrtc_probe, {});
  EXPECT_EQ(a.id, b.id);
  EXPECT_NE(a.id, c.id);
}

TEST(PredefinedMacros, AnswersAreRememberedOnDiskAndADamagedFileIsIgnored) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  forget_predefined_answers();
  auto first = ask({"--gpu-architecture=sm_90"}, {"__CUDA_ARCH__", "NOT_PREDEFINED_X"}, tmp.path());
  ASSERT_TRUE(first);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tmp.path())) {
    files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(test::read_file(files[0].string()),
            "kcache-predefined 1\nU NOT_PREDEFINED_X\nD __CUDA_ARCH__ 900\n");
  // A context whose probe would fail (an option NVRTC rejects) still answers
  // from the file: a remembered answer never runs NVRTC.
  forget_predefined_answers();
  auto id = Toolkit::instance().identify(ToolkitLibrary::nvrtc);
  auto fp = Toolkit::instance().headers_fingerprint();
  auto context = predefined_context(id->version + "\n" + id->build_id, *fp, {"--gpu-architecture=sm_90"},
                                    run_nvrtc_probe, tmp.path());
  context.options = {"--no-such-nvrtc-option"};
  auto again = ask_predefined(context, {"__CUDA_ARCH__"});
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(value(*again, "__CUDA_ARCH__"), "900");
  forget_predefined_answers();
  auto fails = ask_predefined(context, {"__CUDA_ARCH_LIST__"});
  ASSERT_FALSE(fails) << "a name never asked runs the probe, which fails with this option";
  EXPECT_NE(fails.error().message.find("probe"), std::string::npos) << fails.error().message;

  // Damaged (out of order, bad kind, no newline): ignored, asked again.
  for (const std::string damaged : {"kcache-predefined 1\nD __CUDA_ARCH__ 800\nU A\n", "kcache-predefined 1\nX A\n",
                                    "kcache-predefined 1\nD __CUDA_ARCH__ 800", "kcache-predefined 2\n"}) {
    test::write_file(files[0].string(), damaged);
    forget_predefined_answers();
    auto healed = ask({"--gpu-architecture=sm_90"}, {"__CUDA_ARCH__"}, tmp.path());
    ASSERT_TRUE(healed) << healed.error().describe();
    EXPECT_EQ(value(*healed, "__CUDA_ARCH__"), "900") << damaged;
  }
}

// For each documented macro that expands to tokens a header name can hold,
// through the library: the computed include names `m/<value>.h`, which must be
// in the key (a stale hit otherwise).
TEST(PredefinedMacros, ComputedIncludeThroughEachPredefinedMacroKeysTheHeaderNvrtcReads) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  Toolkit::instance().set_memo_dir(tmp.path() / "toolkit");
  const std::vector<std::vector<std::string>> option_sets = {
      {"-arch=sm_80"}, {"-arch=sm_90"}, {"-arch=sm_90a"}, {"-arch=sm_100a", "-std=c++20"},
      {"-arch=sm_90", "-std=c++11"}, {"-arch=sm_90", "-std=c++14"}, {"-arch=sm_90", "-rdc=true", "-G"},
      {"-arch=sm_90", "-use_fast_math", "-device-int128", "-ewp"}};
  int checked = 0;
  for (const auto& options : option_sets) {
    const auto canonical = canonicalize_nvrtc_options(options)->options;
    auto answers = ask(canonical);
    ASSERT_TRUE(answers) << answers.error().describe();
    for (const auto& macro : k_documented) {
      const auto& a = answers->at(macro);
      const bool usable = a.kind != Kind::object_like ||
                          std::all_of(a.value.begin(), a.value.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
      const fs::path dir = tmp.path() / ("case" + std::to_string(checked++));
      fs::create_directories(dir);
      // No pasting (the CLI test pastes): one probe per option set answers every macro.
      const std::string header = "m/" + (a.kind == Kind::object_like ? a.value : macro) + ".h";
      fs::create_directories(dir / "m");
      test::write_file((dir / header).string(), "#define VALUE 1\n");
      const std::string source =
          "#define STR2(x) #x\n#define STR(x) STR2(x)\n#define HDR(x) STR(m/x.h)\n"
          "#include HDR(" + macro + ")\nextern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n";
      Program program(source, (dir / "k.cu").string());
      for (const auto& o : options) {
        program.add_option(o);
      }
      std::vector<HeaderDependency> headers;
      auto key = derive_key(program.request(CompileTarget::ptx), &headers);
      const std::string what = macro + " with " + canonical.front() + (options.size() > 1 ? " ..." : "");
      if (a.kind == Kind::other) {
        ASSERT_FALSE(key) << what << ": a function-like predefined macro must make the request not cacheable";
        EXPECT_EQ(key.error().code, ErrorCode::unsupported);
        EXPECT_NE(key.error().message.find(macro), std::string::npos) << key.error().message;
        continue;
      }
      if (!usable) {
        continue;  // expands to no identifier characters (a string): no header name to check
      }
      ASSERT_TRUE(key) << what << ": " << key.error().describe();
      const bool keyed = std::any_of(headers.begin(), headers.end(),
                                     [&](const HeaderDependency& h) { return h.path == (dir / header).string(); });
      EXPECT_TRUE(keyed) << what << ": " << header << " is what NVRTC reads and must be in the key";
    }
  }
  Toolkit::instance().set_memo_dir({});
}

TEST(PredefinedMacros, LocationMacrosAndOperatorsInAComputedIncludeAreNotCacheable) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const std::string macro : {"__FILE__", "__LINE__", "__COUNTER__", "__DATE__", "__TIME__", "__BASE_FILE__"}) {
    const std::string source = "#define STR2(x) #x\n#define STR(x) STR2(x)\n#define ID(x) x\n"
                               "#if 0\n#include ID(" + macro + ")\n#endif\n__global__ void k() {}\n";
    Program program(source, "k.cu");
    program.add_option("-arch=sm_90");
    auto key = derive_key(program.request(CompileTarget::ptx));
    ASSERT_FALSE(key) << macro;
    EXPECT_EQ(key.error().code, ErrorCode::unsupported);
    EXPECT_NE(key.error().message.find("uses " + macro), std::string::npos) << key.error().message;
  }
}

TEST(PredefinedMacros, OnlyIdentifiersTheImplementationMayDefineAreAsked) {
  for (const char* yes : {"__CUDA_ARCH__", "_Foo", "ver__CUDACC_VER_MAJOR__", "NULL", "va_start", "unix"}) {
    EXPECT_TRUE(may_be_predefined(yes)) << yes;
  }
  for (const char* no : {"ver13", "swap_ranges", "h", "_foo", "CAT", "STR2", "_"}) {
    EXPECT_FALSE(may_be_predefined(no)) << no;
  }
}

// A scan without a predefined context (a library caller of scan_headers)
// cannot know: not cacheable, never a guess.
TEST(PredefinedMacros, ScanWithoutAContextIsNotCacheable) {
  test::TempDir tmp;
  ScanInput in;
  const std::string src = "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDA_ARCH__.h)\n";
  in.source = src;
  in.program_name = (tmp.path() / "k.cu").string();
  auto r = scan_headers(in);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_NE(r->not_cacheable.find("uses __CUDA_ARCH__, which NVRTC may predefine"), std::string::npos)
      << r->not_cacheable;
  EXPECT_EQ(r->not_cacheable.find("=predefined"), std::string::npos) << r->not_cacheable;
}

}  // namespace
}  // namespace kcache::jit
