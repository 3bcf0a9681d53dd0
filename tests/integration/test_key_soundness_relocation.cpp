// The key soundness suite, relocation part: small projects on disk, copied to
// other directories, compiled there by the real `kcache compile` (one process
// per command, and worker processes with -j). A hit must give the bytes a fresh
// compile in that directory gives (modulo the module ids NVRTC does not
// reproduce, tests/support/nvrtc_output.hpp); relocated release builds must
// still hit. docs/keys.md says what NVRTC writes into each output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/nvrtc_output.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Run {
  int status = -1;
  std::string out;
};

// Runs `kcache <args>` after a shell `cd dir` (so $PWD is `dir` as written),
// with KCACHE_DIR=`cache`; stdout and stderr together.
Run kcache_in(const fs::path& dir, const fs::path& cache, const std::string& args) {
  const std::string cmd = "cd '" + dir.string() + "' && KCACHE_DIR='" + cache.string() + "' '" + KCACHE_CLI_PATH +
                          "' " + args + " 2>&1";
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    r.out.append(buf, n);
  }
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const char* const k_header = "__device__ inline float sq(float x) { return x * x; }\n";

// NVRTC names this kernel's internal entities after the extern "C" kernel: reproducible.
const char* const k_reproducible =
    "#include \"h.h\"\n"
    "extern \"C\" __global__ void f(float* p) { p[threadIdx.x] = sq(p[threadIdx.x]); }\n";

// Only a template instantiation and an anonymous namespace, like CUB kernels:
// NVRTC's module id holds a hash of the directory and the process id.
const char* const k_not_reproducible =
    "#include \"h.h\"\n"
    "namespace { __device__ float bias[4]; }\n"
    "template <int N> __global__ void f(float* p) {\n"
    "  bias[threadIdx.x & 3] += N;\n"
    "  p[threadIdx.x] = sq(p[threadIdx.x]) + bias[1];\n"
    "}\n"
    "template __global__ void f<1>(float*);\n";

// Writes the project (k.cu, inc/h.h) into `dir`.
void write_project(const fs::path& dir, const char* source) {
  fs::create_directories(dir / "inc");
  test::write_file(dir / "inc" / "h.h", k_header);
  test::write_file(dir / "k.cu", source);
}

struct Outcome {
  bool hit = false;
  std::string bytes;
};

// `kcache compile <file> <args> -o OUT --json` in `dir`, OUT in a temporary directory.
Outcome compile_in(const fs::path& dir, const fs::path& cache, const std::string& args,
                   const std::string& file = "k.cu") {
  const test::TempDir out_dir;
  const fs::path out = out_dir.path() / "out";
  auto r = kcache_in(dir, cache, "compile " + file + " " + args + " -o '" + out.string() + "' --json");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  Outcome o;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  o.hit = !j.is_discarded() && j.value("hit", false);
  o.bytes = test::read_file(out);
  EXPECT_FALSE(o.bytes.empty()) << args;
  return o;
}

// A fresh compile in `dir`, without the cache.
std::string fresh_in(const fs::path& dir, const std::string& args, const std::string& file = "k.cu") {
  test::TempDir no_cache;
  return compile_in(dir, no_cache.path(), args + " --no-cache", file).bytes;
}

std::string comparable(const std::string& kind, const std::string& bytes) {
  auto c = test::comparable_output(kind, bytes);
  EXPECT_TRUE(c) << kind << ": " << c.error().describe();
  return c ? *c : std::string();
}

struct Variant {
  std::string target;
  std::string options;  // passed with -X
  bool relocated_hit;   // NVRTC writes no directory into this output, so another directory may reuse it
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"ptx", "", true},           {"ptx", "-lineinfo", false},     {"ptx", "-G", false},
      {"cubin", "", true},         {"cubin", "-lineinfo", false},   {"cubin", "-G", false},
      {"cubin", "-rdc=true", true}, {"ltoir", "", false},           {"ltoir", "-rdc=true", false},
      {"ltoir", "-lineinfo", false}, {"ltoir", "-G", false},
  };
  return v;
}

std::string args_of(const Variant& v, const std::string& include = "-I inc") {
  return "--target " + v.target + " --arch sm_90 " + include + (v.options.empty() ? "" : " -X " + v.options);
}

// Issue 10 item 1: the same relative command line in a copy of the project.
TEST(KeySoundnessRelocation, SameCommandInAnotherDirectoryGivesThatDirectorysBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path a = tmp.path() / "a";
  const fs::path b = tmp.path() / "copy" / "b";
  write_project(a, k_reproducible);
  write_project(b, k_reproducible);
  for (const auto& v : variants()) {
    const std::string args = args_of(v);
    const auto first = compile_in(a, cache, args);
    EXPECT_FALSE(first.hit) << args;
    EXPECT_TRUE(compile_in(a, cache, args).hit) << args << ": the same directory reuses its entry";
    const auto moved = compile_in(b, cache, args);
    const std::string fresh = fresh_in(b, args);
    EXPECT_EQ(moved.bytes, fresh) << args << (moved.hit ? ": a hit returned" : ": a miss returned")
                                  << " other bytes than a fresh compile in the copy";
    EXPECT_EQ(moved.hit, v.relocated_hit) << args;
    EXPECT_EQ(first.bytes == fresh, v.relocated_hit) << args << ": NVRTC's output does not behave as measured";
  }
}

// Issue 10 item 5: outputs NVRTC does not reproduce compare equal once the
// module ids are masked, and a stale hit (another directory's line table)
// still compares different.
TEST(KeySoundnessRelocation, NonReproducibleOutputComparesModuloModuleIdsAndStillCatchesStaleBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path a = tmp.path() / "a";
  const fs::path b = tmp.path() / "b";
  write_project(a, k_not_reproducible);
  write_project(b, k_not_reproducible);
  for (const std::string target : {"ptx", "cubin", "ltoir"}) {
    for (const std::string debug : {"", "-lineinfo"}) {
      const Variant v{target, debug, false};
      const std::string args = args_of(v);
      const std::string fresh1 = fresh_in(b, args);
      const std::string fresh2 = fresh_in(b, args);
      EXPECT_NE(fresh1, fresh2) << args << ": NVRTC now reproduces this output; update docs/keys.md";
      EXPECT_EQ(comparable(target, fresh1), comparable(target, fresh2)) << args;

      const auto in_a = compile_in(a, cache, args);
      const auto in_b = compile_in(b, cache, args);
      EXPECT_EQ(in_b.hit, target != "ltoir" && debug.empty()) << args;
      EXPECT_EQ(comparable(target, in_b.bytes), comparable(target, fresh1)) << args;
      if (!debug.empty()) {
        // What a stale hit would have returned: still told apart after masking.
        EXPECT_NE(comparable(target, in_a.bytes), comparable(target, fresh1)) << args;
      }
    }
  }
}

// Relocated builds share entries wherever the output is identical: release
// builds (above) and -lineinfo builds that name the files by absolute paths.
TEST(KeySoundnessRelocation, LineInfoWithAbsolutePathsIsSharedAcrossWorkingDirectories) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path project = tmp.path() / "project";
  write_project(project, k_reproducible);
  fs::create_directories(tmp.path() / "w1");
  fs::create_directories(tmp.path() / "w2");
  const std::string file = (project / "k.cu").string();
  const std::string args = "--target ptx --arch sm_90 -I " + (project / "inc").string() + " -X -lineinfo";
  EXPECT_FALSE(compile_in(tmp.path() / "w1", cache, args, file).hit);
  const auto second = compile_in(tmp.path() / "w2", cache, args, file);
  EXPECT_TRUE(second.hit);
  EXPECT_EQ(second.bytes, fresh_in(tmp.path() / "w2", args, file));
  EXPECT_NE(second.bytes.find("\"" + file + "\""), std::string::npos) << "the line table names the source";
}

// NVRTC takes $PWD when it names the working directory: a directory entered
// through a symbolic link writes the link's path.
TEST(KeySoundnessRelocation, DirectoryEnteredThroughASymbolicLinkGetsItsOwnBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path real = tmp.path() / "real";
  const fs::path link = tmp.path() / "link";
  write_project(real, k_reproducible);
  fs::create_directory_symlink(real, link);
  for (const std::string debug : {"-G", "-lineinfo"}) {
    const std::string args = "--target ptx --arch sm_90 -I inc -X " + debug;
    EXPECT_FALSE(compile_in(real, cache, args).hit);
    const auto via_link = compile_in(link, cache, args);
    const std::string fresh_via_link = fresh_in(link, args);
    EXPECT_NE(fresh_via_link, fresh_in(real, args)) << debug << ": NVRTC's output does not behave as measured";
    EXPECT_FALSE(via_link.hit) << debug;
    EXPECT_EQ(via_link.bytes, fresh_via_link) << debug;
    EXPECT_TRUE(compile_in(link, cache, args).hit) << debug;
  }
}

// `--explain` (and so `why-miss`) names the field that made the relocated compile miss.
TEST(KeySoundnessRelocation, ExplainNamesTheWorkingDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path a = tmp.path() / "a";
  const fs::path b = tmp.path() / "b";
  write_project(a, k_reproducible);
  write_project(b, k_reproducible);
  const std::string args = "k.cu --target cubin --arch sm_90 -I inc -X -G -o out.cubin";
  ASSERT_EQ(kcache_in(a, cache, "compile " + args).status, 0);
  const auto r = kcache_in(b, cache, "compile " + args + " --explain");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 field(s) differ"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("working_directory\n    cached: " + a.string() + "\n    this: " + b.string()),
            std::string::npos)
      << r.out;
}

// Several files compiled in worker processes (-j 2) get the bytes of the
// directory the command runs in.
TEST(KeySoundnessRelocation, WorkerProcessesCompileForTheCommandsDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  const fs::path a = tmp.path() / "a";
  const fs::path b = tmp.path() / "b";
  for (const auto& dir : {a, b}) {
    write_project(dir, k_reproducible);
    test::write_file(dir / "k2.cu", std::string(k_reproducible) + "extern \"C\" __global__ void g() {}\n");
  }
  const std::string args = "--target ptx --arch sm_90 -I inc -X -lineinfo";
  ASSERT_EQ(kcache_in(a, cache, "compile k.cu k2.cu -j 2 " + args).status, 0);
  const auto r = kcache_in(b, cache, "compile k.cu k2.cu -j 2 " + args);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string stem : {"k", "k2"}) {
    const std::string got = test::read_file(b / (stem + ".ptx"));
    EXPECT_EQ(got, fresh_in(b, args, stem + ".cu")) << stem;
    EXPECT_NE(got.find(b.string()), std::string::npos) << stem;
    EXPECT_EQ(got.find(a.string()), std::string::npos) << stem << " names the other directory";
  }
}

// The CUB kernel of bench/corpus: two fresh compiles in two processes differ
// (issue 10 item 5) and compare equal modulo the module ids.
TEST(KeySoundnessRelocation, CubKernelDiffersBetweenProcessesOnlyInModuleIds) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto home = Toolkit::instance().cuda_home();
  const fs::path corpus = fs::path(KCACHE_SOURCE_DIR) / "bench" / "corpus";
  const std::string args = "--target cubin --arch sm_90 -I '" + (home / "include" / "cccl").string() + "' -I '" +
                           (home / "include").string() + "'";
  const std::string first = fresh_in(corpus, args, "heavy_cub.cu");
  const std::string second = fresh_in(corpus, args, "heavy_cub.cu");
  EXPECT_NE(first, second) << "NVRTC now reproduces CUB kernels; update docs/keys.md";
  EXPECT_EQ(comparable("cubin", first), comparable("cubin", second));
}

}  // namespace
}  // namespace kcache
