// The key soundness suite, stale hits of issue 39: inputs NVRTC reads (or
// paths it writes) that no key held. Each test edits a file or moves the
// compile (another working directory, another checkout), then compares what
// the real `kcache compile` returns with a fresh compile of the same files
// (--no-cache: the real NVRTC, no key). Each failed on kcache before the fix:
//   - a computed include whose macro is not defined at the #include
//     (defined after it, #undef'd before it, -U, or only in a branch not taken);
//   - a relative `#line` name under -lineinfo with only absolute paths given;
//   - trigraphs (`?\?=include`) with -std=c++14;
//   - a value computed from `__FILE__` under base_dir, where the name is
//     formed through a line splice, a toolkit macro or token pasting;
//   - base_dir above every checkout (/home) sharing nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class KeySoundnessStale : public test::CliShell {
protected:
  struct Result {
    int rc = -1;
    bool hit = false;
    bool cacheable = false;
    std::string key;
    std::string reason;
    std::string bytes;
    std::string log;
  };

  // `kcache compile <file> <args>` in `cwd` (a shell `cd`, so $PWD is `cwd`
  // as written) with `env` before it; --no-cache with `fresh`.
  Result compile(const fs::path& cwd, const std::string& file, const std::string& args, const std::string& env = {},
                 bool fresh = false) {
    const fs::path out = root() / (fresh ? "fresh.out" : "cached.out");
    fs::remove(out);
    const auto r = sh("cd '" + cwd.string() + "' && " + env + " \"$K\" compile '" + file + "' " + args +
                      " --json -o '" + out.string() + "'" + (fresh ? " --no-cache" : ""));
    Result res;
    res.rc = r.rc;
    res.log = r.out + r.err;
    res.bytes = test::read_file(out);
    if (r.rc != 0) {
      return res;
    }
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) {
      return res;
    }
    res.hit = j.value("hit", false);
    res.cacheable = j.value("cacheable", false);
    res.key = j.value("key", std::string());
    res.reason = j.value("not_cacheable_reason", std::string());
    return res;
  }

  // Compiles through the cache and fails the test when a hit returns other
  // bytes than a fresh compile of the same files in the same place. Returns the result.
  Result checked(const fs::path& cwd, const std::string& file, const std::string& args, const std::string& what,
                 const std::string& env = {}) {
    Result cached = compile(cwd, file, args, env);
    EXPECT_EQ(cached.rc, 0) << what << "\n" << cached.log;
    EXPECT_TRUE(cached.cacheable) << what << ": " << cached.reason;
    const Result fresh = compile(cwd, file, args, env, true);
    EXPECT_EQ(fresh.rc, 0) << what << "\n" << fresh.log;
    EXPECT_EQ(cached.bytes, fresh.bytes)
        << what << (cached.hit ? ": the cache returned other bytes than a fresh compile (a stale hit)"
                               : ": a miss returned other bytes than a fresh compile");
    return cached;
  }
};

bool holds_value(const std::string& ptx, const std::string& value) {
  return ptx.find("mov.u32 \t%r1, " + value + ";") != std::string::npos ||
         ptx.find("mov.b32 \t%r1, " + value + ";") != std::string::npos;
}

const char* const k_computed_prelude =
    "#define STR(x) #x\n"
    "#define XSTR(x) STR(x)\n"
    "#define CAT_(a, b) a##b\n"
    "#define CAT(a, b) CAT_(a, b)\n";

// NVRTC reads vX.h where X is not defined at the #include; kcache formed
// only v1.h from X's definition elsewhere, so an edit of vX.h was a hit
// with the old output.
TEST_F(KeySoundnessStale, ComputedIncludeWithTheMacroUndefinedThereKeysTheHeaderNamedAsWritten) {
  KCACHE_REQUIRE_TOOLKIT();
  struct Case {
    std::string what, source, header, args;
  };
  const std::string use = "#include XSTR(CAT(v, X).h)\n";
  const std::string kernel = "extern \"C\" __global__ void k(int* p) { p[0] = V; }\n";
  const std::vector<Case> cases = {
      {"X defined after the #include", k_computed_prelude + use + "#define X 1\n" + kernel, "", ""},
      {"X defined and #undef'd before it", std::string(k_computed_prelude) + "#define X 1\n#undef X\n" + use + kernel,
       "", ""},
      {"-DX=1 -UX", k_computed_prelude + use + kernel, "", "-D X=1 -X -UX"},
      {"X defined only under a false #ifdef in a header",
       std::string(k_computed_prelude) + "#include \"defs.h\"\n" + use + kernel,
       "#ifdef NEVER_DEFINED\n#define X 1\n#endif\n", ""},
  };
  int n = 0;
  for (const auto& c : cases) {
    const fs::path d = root() / ("p" + std::to_string(n++));
    fs::create_directories(d);
    test::write_file(d / "k.cu", c.source);
    test::write_file(d / "defs.h", c.header);
    test::write_file(d / "vX.h", "#define V 11\n");
    test::write_file(d / "v1.h", "#define V 22\n");
    const std::string args = "--target ptx --arch sm_90 " + c.args;
    auto first = checked(d, "k.cu", args, c.what + ": first");
    EXPECT_TRUE(holds_value(first.bytes, "11")) << c.what << ": NVRTC reads vX.h\n" << first.bytes;
    EXPECT_TRUE(checked(d, "k.cu", args, c.what + ": unchanged").hit) << c.what;
    test::write_file(d / "vX.h", "#define V 33\n");
    auto edited = checked(d, "k.cu", args, c.what + ": vX.h edited");
    EXPECT_TRUE(holds_value(edited.bytes, "33")) << c.what << "\n" << edited.bytes;
  }
}

// NVRTC joins a relative #line name to the working directory under
// -lineinfo; with only absolute paths given the directory was not keyed.
TEST_F(KeySoundnessStale, RelativeLineNameUnderLineinfoKeysTheWorkingDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path proj = root() / "proj";
  fs::create_directories(proj / "inc");
  fs::create_directories(root() / "cwd_one");
  fs::create_directories(root() / "cwd_two_longer");
  const std::string kernel = "extern \"C\" __global__ void k(int* p) { p[0] = LINEV; }\n";
  struct Case {
    std::string what, source, header;
  };
  const std::vector<Case> cases = {
      {"#line in the source", "#include \"h.h\"\n#line 1 \"gen/kernel.cu\"\n" + kernel, "#define LINEV 1\n"},
      {"#line in a header found through an absolute -I", "#include \"h.h\"\n" + kernel,
       "#line 40 \"gen/h.h\"\n__device__ __noinline__ int g(int x) { return x * x + 1; }\n#define LINEV g(p[1])\n"},
      {"#line after a block comment", "#include \"h.h\"\n/* c */ # 1 \"gen/k2.cu\"\n" + kernel, "#define LINEV 3\n"},
  };
  for (const auto& c : cases) {
    test::write_file(proj / "k.cu", c.source);
    test::write_file(proj / "inc" / "h.h", c.header);
    const std::string args = "--target ptx --arch sm_90 -I '" + (proj / "inc").string() + "' -X -lineinfo";
    const std::string file = (proj / "k.cu").string();
    const auto one = checked(root() / "cwd_one", file, args, c.what + ": first directory");
    EXPECT_NE(one.bytes.find((root() / "cwd_one" / "gen").string()), std::string::npos)
        << c.what << ": NVRTC names the working directory\n" << one.bytes;
    const auto two = checked(root() / "cwd_two_longer", file, args, c.what + ": another directory");
    EXPECT_FALSE(two.hit) << c.what;
    EXPECT_TRUE(checked(root() / "cwd_two_longer", file, args, c.what + ": again").hit) << c.what;
  }
}

// NVRTC honours trigraphs with -std=c++14: `?\?=include "h.h"` reads h.h.
TEST_F(KeySoundnessStale, TrigraphIncludeIsKeyedWhereTheStandardHonoursTrigraphs) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path d = root() / "tri";
  fs::create_directories(d);
  test::write_file(d / "k.cu", "?\?=include \"h.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = V; }\n");
  test::write_file(d / "h.h", "#define V 5\n");
  const std::string args = "--target ptx --arch sm_90 -X -std=c++14 -X -diag-suppress=1406";
  EXPECT_TRUE(holds_value(checked(d, "k.cu", args, "first").bytes, "5"));
  EXPECT_TRUE(checked(d, "k.cu", args, "unchanged").hit);
  test::write_file(d / "h.h", "#define V 6\n");
  EXPECT_TRUE(holds_value(checked(d, "k.cu", args, "h.h edited").bytes, "6"));
  // A splice made by a trigraph (`?\?/` newline) inside the directive.
  test::write_file(d / "k.cu", "#inc?\?/\nlude \"h.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = V; }\n");
  EXPECT_TRUE(holds_value(checked(d, "k.cu", args, "spliced by ?\?/").bytes, "6"));
  test::write_file(d / "h.h", "#define V 7\n");
  EXPECT_TRUE(holds_value(checked(d, "k.cu", args, "h.h edited again").bytes, "7"));
}

// A value computed from `__FILE__` (its length, at compile time) is not in
// the output as a path, so only the key can keep checkouts of other path
// lengths apart. The name is formed in a header under -I (the header's path
// is keyed relative to base_dir; the program name's directory has rules of
// its own, deps/name_directory.hpp).
TEST_F(KeySoundnessStale, FileNameFormedThroughSplicesToolkitMacrosAndPastingIsNotShared) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string cccl = (Toolkit::instance().cuda_home() / "include" / "cccl").string();
  struct Case {
    std::string what, header, reason;
  };
  const std::string use =
      "__host__ __device__ constexpr int length(const char* s) { return *s ? 1 + length(s + 1) : 0; }\n"
      "__device__ inline int here() { constexpr int n = length(WHERE); return n; }\n";
  const std::vector<Case> cases = {
      {"a line splice", "#define WHERE __FI\\\nLE__\n" + use, "uses __FILE__"},
      {"the toolkit's _CCCL_BUILTIN_FILE()",
       "#include <cuda/std/__cccl/builtin.h>\n#define WHERE _CCCL_BUILTIN_FILE()\n" + use, "_CCCL_BUILTIN_FILE"},
      {"token pasting", std::string(k_computed_prelude) + "#define WHERE CAT(__FI, LE__)\n" + use, "pastes"},
  };
  int n = 0;
  for (const auto& c : cases) {
    const fs::path a = root() / ("a" + std::to_string(n));
    const fs::path b = root() / ("checkout_b_longer" + std::to_string(n++));
    for (const auto& ck : {a, b}) {
      fs::create_directories(ck / "src");
      fs::create_directories(ck / "include");
      test::write_file(ck / "src" / "k.cu",
                       "#include \"h.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = here(); }\n");
      test::write_file(ck / "include" / "h.h", c.header);
    }
    auto args = [&](const fs::path& ck) {
      return "--target ptx --arch sm_90 -I '" + (ck / "include").string() + "' -I '" + cccl + "'";
    };
    const auto first = checked(a, (a / "src/k.cu").string(), args(a), c.what + ": checkout A",
                               "KCACHE_BASE_DIR='" + a.string() + "'");
    const auto second = checked(b, (b / "src/k.cu").string(), args(b), c.what + ": checkout B",
                                "KCACHE_BASE_DIR='" + b.string() + "'");
    EXPECT_FALSE(second.hit) << c.what;
    EXPECT_NE(first.bytes, second.bytes) << c.what << ": the name's length differs between the checkouts";
    const auto why = sh("\"$K\" why-miss " + first.key + " " + second.key);
    EXPECT_NE(why.out.find(c.reason), std::string::npos) << c.what << "\n" << why.out << why.err;
  }
}

// base_dir above every checkout (/home, as docs/configuration.md suggests):
// /home/a/proj and /home/bb/proj, each built from its own root with absolute
// paths, share (paths keyed relative to the working directory).
TEST_F(KeySoundnessStale, BaseDirAboveTheCheckoutsShares) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string source = "#include \"h.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = twice(p[1]); }\n";
  for (const std::string who : {"a", "bb"}) {
    fs::create_directories(root() / who / "proj" / "include");
    test::write_file(root() / who / "proj" / "k.cu", source);
    test::write_file(root() / who / "proj" / "include" / "h.h",
                     "__device__ inline int twice(int x) { return 2 * x; }\n");
  }
  const std::string env = "KCACHE_BASE_DIR='" + root().string() + "'";
  auto build = [&](const std::string& who, const std::string& what) {
    const fs::path ck = root() / who / "proj";
    return checked(ck, (ck / "k.cu").string(),
                   "--target ptx --arch sm_90 -I '" + (ck / "include").string() + "'", what, env);
  };
  const auto a = build("a", "checkout a");
  const auto b = build("bb", "checkout bb");
  EXPECT_TRUE(b.hit) << "the second checkout under base_dir must hit the first's entry";
  EXPECT_EQ(a.key, b.key);
  // A header that differs is still told apart.
  test::write_file(root() / "bb" / "proj" / "include" / "h.h", "__device__ inline int twice(int x) { return 3 * x; }\n");
  EXPECT_FALSE(build("bb", "checkout bb, header edited").hit);
}

// The property: small programs that combine computed includes, #undef, -U,
// splices, pasting, trigraphs and #line, over many seeds; after a random edit
// or move, every hit equals a fresh compile. Bounded in time; the seeds are printed.
TEST_F(KeySoundnessStale, RandomProgramsHitOnlyWithTheBytesOfAFreshCompile) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::seconds(40);
  std::random_device rd;
  const unsigned first_seed = std::getenv("KCACHE_STALE_SEED") != nullptr
                                  ? static_cast<unsigned>(std::stoul(std::getenv("KCACHE_STALE_SEED")))
                                  : rd();
  int seeds = 0;
  int hits = 0;
  for (unsigned seed = first_seed; std::chrono::steady_clock::now() - start < budget && seeds < 64; ++seed) {
    ++seeds;
    std::printf("[ seed     ] %u (KCACHE_STALE_SEED=%u reruns from it)\n", seed, seed);
    std::fflush(stdout);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    const fs::path d = root() / ("s" + std::to_string(seed));
    fs::create_directories(d / "inc");
    // The computed include: X defined before, after, #undef'd, -D/-U, or in a dead branch.
    std::string pre = k_computed_prelude;
    std::string post;
    std::string args = "--target ptx --arch sm_90 -I '" + (d / "inc").string() + "'";
    switch (pick(5)) {
      case 0: pre += "#define X 1\n"; break;
      case 1: post += "#define X 1\n"; break;
      case 2: pre += "#define X 1\n#undef X\n"; break;
      case 3: args += " -D X=1 -X -UX"; break;
      default: pre += "#if 0\n#define X 1\n#endif\n"; break;
    }
    const bool trigraphs = pick(2) == 0;
    if (trigraphs) {
      args += " -X -std=c++14 -X -diag-suppress=1406";
    }
    const std::string hash = trigraphs && pick(2) == 0 ? "?\?=" : "#";
    const std::string include_line = pick(2) == 0 ? hash + "include XSTR(CAT(v, X).h)\n" : hash + "inc\\\nlude XSTR(CAT(v, X).h)\n";
    const bool line = pick(2) == 0;
    if (line) {
      args += " -X -lineinfo";
    }
    const std::string line_text = line ? "#line 3 \"gen/k.cu\"\n" : "";
    const std::string source = pre + include_line + post + line_text +
                               "extern \"C\" __global__ void k(int* p) { p[0] = V + W; }\n";
    test::write_file(d / "k.cu", source);
    test::write_file(d / "inc" / "vX.h", "#define V 10\n#include \"w.h\"\n");
    test::write_file(d / "inc" / "v1.h", "#define V 20\n#include \"w.h\"\n");
    test::write_file(d / "inc" / "w.h", "#define W 1\n");
    const std::string file = (d / "k.cu").string();
    checked(d, file, args, "seed " + std::to_string(seed) + ": first");
    hits += checked(d, file, args, "seed " + std::to_string(seed) + ": again").hit ? 1 : 0;
    // One random change, then the check again.
    switch (pick(4)) {
      case 0: test::write_file(d / "inc" / "vX.h", "#define V 30\n#include \"w.h\"\n"); break;
      case 1: test::write_file(d / "inc" / "v1.h", "#define V 40\n#include \"w.h\"\n"); break;
      case 2: test::write_file(d / "inc" / "w.h", "#define W 2\n"); break;
      default: {
        const fs::path other = root() / ("elsewhere" + std::to_string(seed));
        fs::create_directories(other);
        checked(other, file, args, "seed " + std::to_string(seed) + ": another working directory");
        break;
      }
    }
    checked(d, file, args, "seed " + std::to_string(seed) + ": after the change");
    if (HasFailure()) {
      break;
    }
  }
  std::printf("[ property ] %d seeds from %u, %d unchanged recompiles hit\n", seeds, first_seed, hits);
  EXPECT_GT(seeds, 0);
  EXPECT_EQ(hits, seeds) << "an unchanged program must hit";
}

}  // namespace
}  // namespace kcache
