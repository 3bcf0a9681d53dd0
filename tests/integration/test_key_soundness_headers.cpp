// The header part of the key soundness suite: small projects on disk, the
// real `kcache compile` in separate processes, every answer compared with a
// compile that bypasses the cache. Covers headers reached through toolkit
// headers (a user directory shadowing a CCCL header), computed includes in
// taken and untaken branches, a header edited, added to an earlier include
// directory, removed, replaced by a symlink, and touch-only changes that must
// still hit.
//
// A header manifest trusts a file's identity only once it is older than two
// seconds (deps/header_manifest.hpp), so the steps that must exercise a
// remembered manifest wait that long first (wait_until_trusted()).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Run {
  int status = -1;
  std::string out;
};

Run run_cli(const fs::path& cache, const std::string& args, const fs::path& cwd, const std::string& env = {}) {
  const std::string cmd = "cd '" + cwd.string() + "' && " + env + " KCACHE_DIR='" + cache.string() + "' '" +
                          KCACHE_CLI_PATH + "' " + args + " 2>&1";
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

void wait_until_trusted() {
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
}

// One project: compiles through the cache and without it, and checks the answers agree.
class Project {
public:
  Project(fs::path dir, std::string args) : m_dir(std::move(dir)), m_args(std::move(args)) {}

  // Compiles through the cache; on a hit, fails the test when the bytes
  // differ from an uncached compile of the same files (a miss compiled them
  // just now). Returns whether it hit.
  bool compile_checked(const std::string& what) {
    auto cached = run_cli(m_dir / "cache", "compile k.cu " + m_args + " --json -o cached.out", m_dir);
    EXPECT_EQ(cached.status, 0) << what << "\n" << cached.out;
    if (cached.status != 0) {
      return false;
    }
    const auto j = nlohmann::json::parse(cached.out);
    EXPECT_TRUE(j["cacheable"].get<bool>()) << what << ": " << j.value("not_cacheable_reason", "");
    const bool hit = j["hit"].get<bool>();
    if (hit) {
      auto fresh = run_cli(m_dir / "cache", "compile k.cu " + m_args + " --no-cache -o fresh.out", m_dir);
      EXPECT_EQ(fresh.status, 0) << what << "\n" << fresh.out;
      EXPECT_EQ(test::read_file((m_dir / "cached.out").string()), test::read_file((m_dir / "fresh.out").string()))
          << what << ": the cache returned other bytes than a fresh compile (a stale hit)";
    }
    return hit;
  }

  std::string output() const { return test::read_file((m_dir / "cached.out").string()); }
  const fs::path& dir() const { return m_dir; }

private:
  fs::path m_dir;
  std::string m_args;
};

bool holds(const std::string& ptx, const std::string& value) {
  return ptx.find("mov.u32 \t%r1, " + value + ";") != std::string::npos ||
         ptx.find("mov.b32 \t%r1, " + value + ";") != std::string::npos;
}

std::string cuda_include() {
  return (Toolkit::instance().cuda_home() / "include").string();
}

// `-I userccl` holds its own cuda/std/type_traits; the kernel includes only
// <cooperative_groups.h>, a toolkit header, which reaches cuda/std/type_traits
// through the include path. The user's copy is what NVRTC reads, so it is in
// the key: editing it, adding it, removing it all change the answer.
TEST(KeySoundnessHeaders, UserHeaderReachedThroughToolkitHeaderIsInTheKey) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string toolkit_copy = cuda_include() + "/cccl/cuda/std/type_traits";
  if (!fs::exists(toolkit_copy)) {
    GTEST_SKIP() << "this toolkit has no " << toolkit_copy;
  }
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "userccl" / "cuda" / "std");
  const std::string original = test::read_file(toolkit_copy);
  test::write_file((dir / "k.cu").string(),
                   "#include <cooperative_groups.h>\n"
                   "#ifndef USERV\n#define USERV 7\n#endif\n"
                   "extern \"C\" __global__ void f(int* p) { p[0] = USERV; }\n");
  Project p(dir, "--target ptx --arch sm_90 -I userccl -I " + cuda_include() + " -I " + cuda_include() + "/cccl");
  const fs::path user_copy = dir / "userccl" / "cuda" / "std" / "type_traits";

  EXPECT_FALSE(p.compile_checked("toolkit's own type_traits"));
  EXPECT_TRUE(holds(p.output(), "7")) << p.output();
  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("unchanged"));

  // Added to an earlier include directory: the user's copy now shadows the toolkit's.
  test::write_file(user_copy.string(), original + "\n#define USERV 1\n");
  EXPECT_FALSE(p.compile_checked("shadowing copy added"));
  EXPECT_TRUE(holds(p.output(), "1")) << p.output();
  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("shadowing copy unchanged"));

  // Edited, same size.
  test::write_file(user_copy.string(), original + "\n#define USERV 2\n");
  EXPECT_FALSE(p.compile_checked("shadowing copy edited"));
  EXPECT_TRUE(holds(p.output(), "2")) << p.output();
  wait_until_trusted();

  // Removed: back to the toolkit's (the first entry is right again).
  fs::remove(user_copy);
  p.compile_checked("shadowing copy removed");
  EXPECT_TRUE(holds(p.output(), "7")) << p.output();
}

// Thrust-like headers: the device system's headers are named by computed
// includes, one in a taken branch, one in a branch that is never taken.
void write_thrust_like(const fs::path& inc) {
  fs::create_directories(inc / "mythrust" / "detail");
  fs::create_directories(inc / "mythrust" / "system" / "cpp" / "detail");
  fs::create_directories(inc / "mythrust" / "system" / "omp" / "detail");
  test::write_file((inc / "mythrust" / "detail" / "config.h").string(),
                   "#pragma once\n"
                   "#define MYTHRUST_SYSTEM_CPP 1\n"
                   "#define MYTHRUST_SYSTEM_OMP 2\n"
                   "#ifndef MYTHRUST_SYSTEM\n#define MYTHRUST_SYSTEM MYTHRUST_SYSTEM_CPP\n#endif\n"
                   "#if MYTHRUST_SYSTEM == MYTHRUST_SYSTEM_CPP\n#  define __MYTHRUST_NS cpp\n"
                   "#elif MYTHRUST_SYSTEM == MYTHRUST_SYSTEM_OMP\n#  define __MYTHRUST_NS omp\n#endif\n"
                   "#define __MYTHRUST_ROOT mythrust/system/__MYTHRUST_NS\n"
                   "#define MYTHRUST_STR2(x) #x\n#define MYTHRUST_STR(x) MYTHRUST_STR2(x)\n"
                   "#define __MYTHRUST_DETAIL_HEADER(f) <__MYTHRUST_ROOT/detail/f>\n"
                   "#define __MYTHRUST_QUOTED_HEADER(f) MYTHRUST_STR(__MYTHRUST_ROOT/detail/f)\n");
  test::write_file((inc / "mythrust" / "swap.h").string(),
                   "#pragma once\n"
                   "#include <mythrust/detail/config.h>\n"
                   "#include __MYTHRUST_DETAIL_HEADER(swap.h)\n"
                   "#define __MYTHRUST_SCALE_HEADER __MYTHRUST_QUOTED_HEADER(scale.h)\n"
                   "#include __MYTHRUST_SCALE_HEADER\n"
                   "#if 0\n#include __MYTHRUST_DETAIL_HEADER(never.h)\n#endif\n");
  test::write_file((inc / "mythrust" / "system" / "cpp" / "detail" / "swap.h").string(), "#define SWAPV 11\n");
  test::write_file((inc / "mythrust" / "system" / "omp" / "detail" / "swap.h").string(), "#define SWAPV 22\n");
  test::write_file((inc / "mythrust" / "system" / "cpp" / "detail" / "scale.h").string(), "#define SCALE 1\n");
  test::write_file((inc / "mythrust" / "system" / "omp" / "detail" / "scale.h").string(), "#define SCALE 1\n");
}

TEST(KeySoundnessHeaders, ComputedIncludesAreCacheableAndSoundInTakenAndUntakenBranches) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  write_thrust_like(dir / "inc");
  test::write_file((dir / "k.cu").string(), "#include <mythrust/swap.h>\n"
                                            "extern \"C\" __global__ void f(int* p) { p[0] = SWAPV * SCALE; }\n");
  Project cpp(dir, "--target ptx --arch sm_90 -I inc");
  EXPECT_FALSE(cpp.compile_checked("first"));
  EXPECT_TRUE(holds(cpp.output(), "11")) << cpp.output();
  EXPECT_TRUE(cpp.compile_checked("second process")) << "a computed include must not make the kernel uncacheable";
  wait_until_trusted();
  EXPECT_TRUE(cpp.compile_checked("remembered manifest"));

  // The header the taken branch names (through `<...>`), edited.
  test::write_file((dir / "inc/mythrust/system/cpp/detail/swap.h").string(), "#define SWAPV 33\n");
  EXPECT_FALSE(cpp.compile_checked("taken <computed> header edited"));
  EXPECT_TRUE(holds(cpp.output(), "33")) << cpp.output();
  // The header the taken branch names through a stringized `"..."`, edited.
  test::write_file((dir / "inc/mythrust/system/cpp/detail/scale.h").string(), "#define SCALE 3\n");
  EXPECT_FALSE(cpp.compile_checked("taken \"computed\" header edited"));
  EXPECT_TRUE(holds(cpp.output(), "99")) << cpp.output();

  // The other system, chosen on the command line: the other branch's header.
  Project omp(dir, "--target ptx --arch sm_90 -I inc -D MYTHRUST_SYSTEM=2");
  EXPECT_FALSE(omp.compile_checked("other system"));
  EXPECT_TRUE(holds(omp.output(), "22")) << omp.output();
  test::write_file((dir / "inc/mythrust/system/omp/detail/swap.h").string(), "#define SWAPV 44\n");
  EXPECT_FALSE(omp.compile_checked("other system's header edited"));
  EXPECT_TRUE(holds(omp.output(), "44")) << omp.output();

  // A header only an untaken branch names appears: the answer stays right.
  // (Every system's headers are in every key: the edit above changed cpp's key too.)
  cpp.compile_checked("after the other system's edit");
  wait_until_trusted();
  EXPECT_TRUE(cpp.compile_checked("before the untaken header appears"));
  test::write_file((dir / "inc/mythrust/system/cpp/detail/never.h").string(), "#error never included\n");
  cpp.compile_checked("untaken header added");
  EXPECT_TRUE(holds(cpp.output(), "99")) << cpp.output();
}

// -I a -I b; <h.h> only in b at first. Each change is made after the previous
// answer was remembered with trusted identities.
TEST(KeySoundnessHeaders, HeaderEditedAddedEarlierRemovedAndReplacedBySymlink) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  fs::create_directories(dir / "c");
  test::write_file((dir / "b/h.h").string(), "#include \"inner.h\"\n#define HV (10 + INNER)\n");
  test::write_file((dir / "b/inner.h").string(), "#define INNER 1\n");
  test::write_file((dir / "c/other.h").string(), "#define HV 50\n");
  test::write_file((dir / "k.cu").string(), "#include <h.h>\nextern \"C\" __global__ void f(int* p) { p[0] = HV; }\n");
  Project p(dir, "--target ptx --arch sm_90 -I a -I b");
  EXPECT_FALSE(p.compile_checked("first"));
  EXPECT_TRUE(holds(p.output(), "11")) << p.output();

  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("unchanged"));
  test::write_file((dir / "b/inner.h").string(), "#define INNER 2\n");  // same size
  EXPECT_FALSE(p.compile_checked("nested header edited"));
  EXPECT_TRUE(holds(p.output(), "12")) << p.output();

  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("unchanged again"));
  test::write_file((dir / "a/h.h").string(), "#define HV 30\n");
  EXPECT_FALSE(p.compile_checked("header added to an earlier include directory"));
  EXPECT_TRUE(holds(p.output(), "30")) << p.output();

  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("shadowed, unchanged"));
  fs::remove(dir / "a/h.h");
  p.compile_checked("shadowing header removed");
  EXPECT_TRUE(holds(p.output(), "12")) << p.output();

  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("before the symlink"));
  fs::remove(dir / "b/h.h");
  fs::create_symlink(dir / "c/other.h", dir / "b/h.h");
  EXPECT_FALSE(p.compile_checked("header replaced by a symlink"));
  EXPECT_TRUE(holds(p.output(), "50")) << p.output();

  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("symlink, unchanged"));
  test::write_file((dir / "c/other2.h").string(), "#define HV 60\n");
  fs::remove(dir / "b/h.h");
  fs::create_symlink(dir / "c/other2.h", dir / "b/h.h");
  EXPECT_FALSE(p.compile_checked("symlink pointed elsewhere"));
  EXPECT_TRUE(holds(p.output(), "60")) << p.output();
}

// Changes that leave every byte the compile reads as it was must still hit:
// a touched header, a header rewritten with the same bytes, a new unrelated
// file beside the source, a new output file.
TEST(KeySoundnessHeaders, TouchOnlyChangesStillHit) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "inc");
  test::write_file((dir / "inc/h.h").string(), "#define HV 5\n");
  test::write_file((dir / "k.cu").string(), "#include <h.h>\nextern \"C\" __global__ void f(int* p) { p[0] = HV; }\n");
  Project p(dir, "--target ptx --arch sm_90 -I inc");
  EXPECT_FALSE(p.compile_checked("first"));
  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("remembered"));
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "inc/h.h").c_str(), nullptr, 0), 0);
  EXPECT_TRUE(p.compile_checked("header touched"));
  test::write_file((dir / "inc/h.h").string(), "#define HV 5\n");
  EXPECT_TRUE(p.compile_checked("header rewritten with the same bytes"));
  test::write_file((dir / "notes.txt").string(), "unrelated\n");
  test::write_file((dir / "inc/README").string(), "unrelated\n");
  EXPECT_TRUE(p.compile_checked("unrelated files added"));
  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("after the touch is trusted"));
}

// KCACHE_DISABLE: the header memo writes nothing either.
TEST(KeySoundnessHeaders, DisabledCacheWritesNoHeaderManifest) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "inc");
  test::write_file((dir / "inc/h.h").string(), "#define HV 5\n");
  test::write_file((dir / "k.cu").string(), "#include <h.h>\nextern \"C\" __global__ void f(int* p) { p[0] = HV; }\n");
  auto r = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 -I inc -o k.ptx", dir, "KCACHE_DISABLE=1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(dir / "cache" / "v1" / "headers")) << r.out;
  auto enabled = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 -I inc -o k.ptx", dir);
  ASSERT_EQ(enabled.status, 0) << enabled.out;
  EXPECT_TRUE(fs::exists(dir / "cache" / "v1" / "headers"));
}

// A damaged or foreign manifest is ignored: the answer stays right.
TEST(KeySoundnessHeaders, DamagedManifestIsIgnored) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  fs::create_directories(dir / "inc");
  test::write_file((dir / "inc/h.h").string(), "#define HV 5\n");
  test::write_file((dir / "k.cu").string(), "#include <h.h>\nextern \"C\" __global__ void f(int* p) { p[0] = HV; }\n");
  Project p(dir, "--target ptx --arch sm_90 -I inc");
  EXPECT_FALSE(p.compile_checked("first"));
  std::vector<fs::path> manifests;
  for (const auto& e : fs::recursive_directory_iterator(dir / "cache" / "v1" / "headers")) {
    if (e.is_regular_file() && e.path().filename().string().size() == 64) {
      manifests.push_back(e.path());
    }
  }
  ASSERT_FALSE(manifests.empty());
  for (const auto& m : manifests) {
    std::string text = test::read_file(m.string());
    // Claim the header is gone and nothing else was found: a parser that
    // trusted this would drop the header from the key.
    test::write_file(m.string(), text.substr(0, text.size() / 2));
  }
  test::write_file((dir / "inc/h.h").string(), "#define HV 6\n");
  EXPECT_FALSE(p.compile_checked("header edited, manifest damaged"));
  EXPECT_TRUE(holds(p.output(), "6")) << p.output();
}

// Computed includes through macros NVRTC predefines (issue 23 item 1).
const std::string k_cat_str =
    "#define CAT2(a, b) a##b\n#define CAT(a, b) CAT2(a, b)\n#define STR2(x) #x\n#define STR(x) STR2(x)\n";

std::string nvrtc_major() {
  const auto v = Toolkit::instance().identify(ToolkitLibrary::nvrtc)->version;
  return v.substr(0, v.find('.'));
}

// The reproduction: `ver<major>.h` is what NVRTC reads, so editing it
// is a miss with the new value, and a hit in a new process loads no NVRTC.
TEST(KeySoundnessHeaders, ComputedIncludeThroughThePredefinedVersionIsNoStaleHit) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  const std::string ver = "ver" + nvrtc_major() + ".h";
  test::write_file((dir / "k.cu").string(), k_cat_str + "#include STR(CAT(ver, __CUDACC_VER_MAJOR__).h)\n"
                                            "extern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n");
  test::write_file((dir / ver).string(), "#define VALUE 1\n");
  Project p(dir, "--target ptx --arch sm_90");
  EXPECT_FALSE(p.compile_checked("first"));
  EXPECT_TRUE(holds(p.output(), "1")) << p.output();
  EXPECT_TRUE(p.compile_checked("second process"));
  test::write_file((dir / ver).string(), "#define VALUE 2\n");
  EXPECT_FALSE(p.compile_checked(ver + " edited"));
  EXPECT_TRUE(holds(p.output(), "2")) << p.output() << "\na stale hit still says 1";
  wait_until_trusted();
  EXPECT_TRUE(p.compile_checked("remembered manifest"));
  // The hit used the remembered manifest and answers: NVRTC is not loaded.
  auto traced =
      run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 --explain -o traced.ptx", dir, "LD_DEBUG=files");
  ASSERT_EQ(traced.status, 0) << traced.out;
  EXPECT_NE(traced.out.find(": hit"), std::string::npos) << traced.out;
  EXPECT_EQ(traced.out.find("libnvrtc.so"), std::string::npos) << "a hit must not load NVRTC";
  // The answers were remembered for the user (every cache directory of theirs), not in the cache directory.
  auto predefined_in = [](const fs::path& d) {
    bool found = false;
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      found = found || it->path().filename().string().rfind("predefined-", 0) == 0;
    }
    return found;
  };
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path user = xdg != nullptr && xdg[0] == '/' ? fs::path(xdg) / "kcache-toolkit"
                        : home != nullptr && home[0] == '/' ? fs::path(home) / ".cache" / "kcache-toolkit"
                                                            : dir / "cache" / "v1" / "toolkit";
  EXPECT_TRUE(predefined_in(user) || predefined_in(dir / "cache" / "v1" / "headers")) << user;
  EXPECT_FALSE(predefined_in(dir / "cache" / "v1" / "headers") && fs::is_directory(user))
      << "kept per user when the user's directory can be written";
}

// Per arch and per -std: each request keys the header its own macro names.
TEST(KeySoundnessHeaders, ComputedIncludeThroughArchAndStdMacrosPerRequest) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  test::write_file((dir / "k.cu").string(), k_cat_str + "#include STR(CAT(arch, __CUDA_ARCH__).h)\n"
                                            "#include STR(CAT(std, __cplusplus).h)\n"
                                            "extern \"C\" __global__ void k(int* p) { p[0] = A * S; }\n");
  const std::vector<std::pair<std::string, std::string>> archs = {{"sm_80", "800"}, {"sm_90", "900"},
                                                                   {"sm_90a", "900"}, {"sm_100a", "1000"}};
  const std::vector<std::pair<std::string, std::string>> stds = {
      {"c++11", "201103L"}, {"c++14", "201402L"}, {"c++17", "201703L"}, {"c++20", "202002L"}};
  for (const auto& [arch, value] : archs) {
    test::write_file((dir / ("arch" + value + ".h")).string(), "#define A 1\n");
  }
  for (const auto& [std_, value] : stds) {
    test::write_file((dir / ("std" + value + ".h")).string(), "#define S 1\n");
  }
  auto project = [&](const std::string& arch, const std::string& std_) {
    return Project(dir, "--target ptx --arch " + arch + " -X -std=" + std_);
  };
  for (const auto& [arch, value] : archs) {
    auto p = project(arch, "c++17");
    p.compile_checked(arch);
    EXPECT_TRUE(p.compile_checked(arch + " again"));
  }
  // arch900.h edited: sm_90 and sm_90a miss and read it, sm_80 and sm_100a still hit.
  test::write_file((dir / "arch900.h").string(), "#define A 3\n");
  for (const auto& [arch, value] : archs) {
    auto p = project(arch, "c++17");
    const bool reads = value == "900";
    EXPECT_EQ(p.compile_checked(arch + " after arch900.h edited"), !reads) << arch;
    EXPECT_TRUE(holds(p.output(), reads ? "3" : "1")) << arch << "\n" << p.output();
  }
  for (const auto& [std_, value] : stds) {
    auto p = project("sm_80", std_);
    p.compile_checked(std_);
    test::write_file((dir / ("std" + value + ".h")).string(), "#define S 5\n");
    EXPECT_FALSE(p.compile_checked(std_ + ": its header edited")) << std_;
    EXPECT_TRUE(holds(p.output(), "5")) << std_ << "\n" << p.output();
  }
}

// `#if __CUDA_ARCH__ >= 900` chooses the header: both branches are keyed, so
// editing either is never a stale hit.
TEST(KeySoundnessHeaders, ConditionalIncludeOnAPredefinedMacroIsSound) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  test::write_file((dir / "k.cu").string(),
                   "#if __CUDA_ARCH__ >= 900 && __has_include(\"hopper.h\")\n#include \"hopper.h\"\n"
                   "#elif __cplusplus >= 202002L\n#include \"cxx20.h\"\n#else\n#include \"older.h\"\n#endif\n"
                   "extern \"C\" __global__ void k(int* p) { p[0] = V; }\n");
  test::write_file((dir / "hopper.h").string(), "#define V 9\n");
  test::write_file((dir / "cxx20.h").string(), "#define V 20\n");
  test::write_file((dir / "older.h").string(), "#define V 8\n");
  // Both projects write cached.out in `dir`: each output is checked right after its compile.
  Project hopper(dir, "--target ptx --arch sm_90");
  Project ampere(dir, "--target ptx --arch sm_80 -X -std=c++20");
  hopper.compile_checked("hopper");
  EXPECT_TRUE(holds(hopper.output(), "9"));
  ampere.compile_checked("ampere");
  EXPECT_TRUE(holds(ampere.output(), "20"));
  for (const auto& [file, v] : std::vector<std::pair<std::string, std::string>>{{"hopper.h", "19"}, {"cxx20.h", "21"}}) {
    test::write_file((dir / file).string(), "#define V " + v + "\n");
    EXPECT_FALSE(hopper.compile_checked("hopper after " + file));
    EXPECT_TRUE(holds(hopper.output(), "19")) << hopper.output();
    EXPECT_FALSE(ampere.compile_checked("ampere after " + file));
    EXPECT_TRUE(holds(ampere.output(), file == "hopper.h" ? "20" : "21")) << ampere.output();
  }
  fs::remove(dir / "hopper.h");
  hopper.compile_checked("hopper.h removed: __has_include takes the other branch");
  EXPECT_TRUE(holds(hopper.output(), "8")) << hopper.output();
}

// `__LINE__` has another value on every line: not cacheable, and the reason
// is in --json, in --explain and in the passport's key record (why-miss).
TEST(KeySoundnessHeaders, ComputedIncludeThroughALocationMacroIsNotCacheableWithAReason) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  const fs::path dir = tmp.path();
  test::write_file((dir / "k.cu").string(), k_cat_str + "#include STR(CAT(line, __LINE__).h)\n"
                                            "extern \"C\" __global__ void k(int* p) { p[0] = VALUE; }\n");
  test::write_file((dir / "line5.h").string(), "#define VALUE 5\n");
  auto first = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 --json -o a.ptx", dir);
  ASSERT_EQ(first.status, 0) << first.out;
  const auto j = nlohmann::json::parse(first.out);
  EXPECT_FALSE(j["cacheable"].get<bool>());
  EXPECT_FALSE(j["hit"].get<bool>());
  const std::string reason = j["not_cacheable_reason"].get<std::string>();
  EXPECT_NE(reason.find("uses __LINE__"), std::string::npos) << reason;
  EXPECT_TRUE(holds(test::read_file((dir / "a.ptx").string()), "5"));
  auto explained = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 --explain -o b.ptx", dir);
  ASSERT_EQ(explained.status, 0) << explained.out;
  EXPECT_NE(explained.out.find("not cacheable: "), std::string::npos) << explained.out;
  EXPECT_NE(explained.out.find("__LINE__"), std::string::npos) << explained.out;
  // why-miss between the passport of this compile and of another: the
  // `not_cacheable` field carries the reason.
  test::write_file((dir / "a.json").string(), j["passport"].dump());
  auto second = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 --json -o c.ptx", dir);
  ASSERT_EQ(second.status, 0) << second.out;
  test::write_file((dir / "c.json").string(), nlohmann::json::parse(second.out)["passport"].dump());
  auto why = run_cli(dir / "cache", "why-miss a.json c.json", dir);
  EXPECT_EQ(why.status, 0) << why.out;
  EXPECT_NE(why.out.find("nonce"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("A is not cacheable (never stored, never a hit): "), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("uses __LINE__"), std::string::npos) << why.out;
  test::write_file((dir / "line5.h").string(), "#define VALUE 6\n");
  auto edited = run_cli(dir / "cache", "compile k.cu --target ptx --arch sm_90 -o d.ptx", dir);
  ASSERT_EQ(edited.status, 0) << edited.out;
  EXPECT_TRUE(holds(test::read_file((dir / "d.ptx").string()), "6")) << "never a hit";
}

}  // namespace
}  // namespace kcache
