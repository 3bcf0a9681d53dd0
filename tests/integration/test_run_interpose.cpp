// `kcache run -- PROGRAM`: an unmodified NVRTC + nvJitLink + NVVM program, run under the
// stand-in library, gets from a warm cache exactly what the real library
// gives (codes, PTX, CUBIN, LTO-IR, logs, lowered names, byte for byte) and
// the real library compiles nothing; whatever is wrong with the cache, the
// program's outputs and exit status are those of a run without kcache.
//
// Real compiles are counted with KCACHE_INTERPOSE_LOG (docs/run.md,
// "Counting"): one line per interposed compile, "<pid> nvrtc <event> <key>".
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "integration/cli_shell.hpp"
#include "support/redis_server.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

const std::string k_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";

// How a client program reaches NVRTC.
enum class Loading { linked, soname, path, deepbind, deepbind_plugin };

std::string loading_name(Loading l) {
  switch (l) {
    case Loading::linked:
      return "linked";
    case Loading::soname:
      return "soname";
    case Loading::path:
      return "path";
    case Loading::deepbind:
      return "deepbind";
    case Loading::deepbind_plugin:
      return "deepbind_plugin";
  }
  return "?";
}

// The number of interposed calls of `library` in `log` that ended with `event`.
std::size_t count(const std::string& log, const std::string& event, const std::string& library = "nvrtc") {
  const std::string word = " " + library + " " + event + " ";
  std::size_t n = 0;
  for (std::size_t at = log.find(word); at != std::string::npos; at = log.find(word, at + 1)) {
    ++n;
  }
  return n;
}

std::size_t warnings(const std::string& err) {
  std::size_t n = 0;
  for (std::size_t at = err.find("kcache: warning:"); at != std::string::npos; at = err.find("kcache: warning:", at + 1)) {
    ++n;
  }
  return n;
}

// In the tsan build (scripts/tsan-run-tests.sh) the stand-in and the client
// programs are built with TSan, and TSan's runtime goes first in LD_PRELOAD:
// a test whose programs are all built by the suite (the clients; `env` only
// execs them) runs under TSan. Other sanitizer builds skip these tests.
#ifdef KCACHE_SANITIZER_RUNTIME
const std::string k_sanitizer_preload = std::string("LD_PRELOAD=") + KCACHE_SANITIZER_RUNTIME + " ";
#else
const std::string k_sanitizer_preload;
#endif

// Skips the test in a sanitizer build: it runs programs not built with the sanitizer (`why`).
#ifdef KCACHE_INTERPOSE_SANITIZED
#define KCACHE_SKIP_UNDER_SANITIZERS(why) GTEST_SKIP() << "sanitizer build: " << (why)
#else
#define KCACHE_SKIP_UNDER_SANITIZERS(why) static_cast<void>(0)
#endif

class RunInterpose : public CliShell {
 protected:
  void SetUp() override {
#if defined(KCACHE_INTERPOSE_SANITIZED) && !defined(KCACHE_SANITIZER_RUNTIME)
    GTEST_SKIP() << "the stand-in is built with sanitizers: it cannot be preloaded into programs built without them";
#endif
    CliShell::SetUp();
    fs::create_directories(dir() / "inc");
    write_file(dir() / "inc" / "disk.h", "#pragma once\n#define DISK_OFFSET 5\n");
  }

  // The command line of the client program for `loading` writing to `out`
  // (with `threads` threads when not 0); empty (and the test fails or is
  // skipped, as the toolkit rules say) when it cannot be had here.
  std::string client(Loading loading, const std::string& out, int threads = 0) {
    std::string tail = " inc " + out + (threads > 0 ? " " + std::to_string(threads) : "");
    // libNVVM for the dlopen clients, and libdevice to add lazily (kcache's toolkit discovery finds both).
    std::string env;
    if (auto nvvm = Toolkit::instance().library_path(ToolkitLibrary::nvvm)) {
      env += "KCACHE_TEST_NVVM='" + fs::canonical(*nvvm).string() + "' ";
    }
    const fs::path libdevice = Toolkit::instance().cuda_home() / "nvvm" / "libdevice" / "libdevice.10.bc";
    if (fs::exists(libdevice)) {
      env += "KCACHE_TEST_LIBDEVICE='" + libdevice.string() + "' ";
    }
    return env + client_command(loading, tail);
  }

  std::string client_command(Loading loading, const std::string& tail) {
    if (loading == Loading::linked) {
#ifdef KCACHE_NVRTC_CLIENT_LINKED
      return std::string(KCACHE_NVRTC_CLIENT_LINKED) + " linked -" + tail;
#else
      return {};
#endif
    }
    if (loading == Loading::deepbind_plugin) {
#ifdef KCACHE_NVRTC_CLIENT_PLUGIN
      return std::string(KCACHE_NVRTC_CLIENT_DLOPEN) + " plugin " + KCACHE_NVRTC_CLIENT_PLUGIN + tail;
#else
      return {};
#endif
    }
    auto lib = Toolkit::instance().library_path(ToolkitLibrary::nvrtc);
    if (!lib) {
      return {};
    }
    const fs::path real = fs::canonical(*lib);
    const std::string client = KCACHE_NVRTC_CLIENT_DLOPEN;
    switch (loading) {
      case Loading::soname:
        return "LD_LIBRARY_PATH='" + real.parent_path().string() + "' " + client + " dlopen " +
               real.filename().string() + tail;
      case Loading::path:
        return client + " dlopen " + real.string() + tail;
      default:
        return client + " deepbind " + real.string() + tail;
    }
  }

  // Runs `command` under `kcache run` with the compile log in `log`.
  ShellRun run(const std::string& command, const std::string& log, const std::string& env = {}) {
    return sh(env + " env " + k_sanitizer_preload + "KCACHE_INTERPOSE_LOG=" + log + " \"$K\" run -- env " + command);
  }

  std::string file(const std::string& name) { return read_file(dir() / name); }
};

class RunInterposeLoading : public RunInterpose, public ::testing::WithParamInterface<Loading> {};

TEST_P(RunInterposeLoading, SecondRunCompilesNothingAndGivesTheRealBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  if (GetParam() == Loading::deepbind || GetParam() == Loading::deepbind_plugin) {
    KCACHE_SKIP_UNDER_SANITIZERS("the sanitizer runtimes refuse dlopen with RTLD_DEEPBIND");
  }
  const std::string plain_cmd = client(GetParam(), "plain.out");
  if (plain_cmd.find("nvrtc_client") == std::string::npos) {
    if (toolkit_required()) {
      FAIL() << "KCACHE_REQUIRE_TOOLKIT=1 but the clients linked with -lnvrtc were not built (no libnvrtc at configure "
                "time)";
    }
    GTEST_SKIP() << "no clients linked with -lnvrtc";
  }
  const ShellRun plain = sh("env " + plain_cmd);
  ASSERT_EQ(plain.rc, 0) << plain.err;
  ASSERT_NE(file("plain.out").find("cubin size_rc=0 size="), std::string::npos);
  // The real nvJitLink on a completed handle: a second Complete and an AddData return 6
  // (NVJITLINK_ERROR_INTERNAL); the warm run, whose links are hits, must answer the same.
  ASSERT_NE(file("plain.out").find("complete-again rc=6\n"), std::string::npos) << file("plain.out");
  ASSERT_NE(file("plain.out").find("after-complete add rc=6 "), std::string::npos) << file("plain.out");

  const ShellRun cold = run(client(GetParam(), "cold.out"), "cold.log");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(warnings(cold.err), 0U) << cold.err;
  EXPECT_EQ(file("cold.out"), file("plain.out"));
  // Four programs compile; the broken one, which NVRTC rejects, is stored as a negative entry.
  EXPECT_EQ(count(file("cold.log"), "compile"), 4U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "uncached"), 0U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "compile", "nvjitlink"), 2U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "compile", "nvvm"), 1U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "uncached", "nvvm"), 1U) << file("cold.log");  // the bad option

  const ShellRun warm = run(client(GetParam(), "warm.out"), "warm.log");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(file("warm.out"), file("plain.out"));
  EXPECT_EQ(count(file("warm.log"), "compile"), 0U) << file("warm.log");
  EXPECT_EQ(count(file("warm.log"), "hit"), 4U) << file("warm.log");  // the broken one replayed
  EXPECT_EQ(count(file("warm.log"), "hit", "nvjitlink"), 2U) << file("warm.log");
  EXPECT_EQ(count(file("warm.log"), "compile", "nvjitlink"), 0U) << file("warm.log");
  EXPECT_EQ(count(file("warm.log"), "hit", "nvvm"), 1U) << file("warm.log");

  // `kcache stats` counts them per library, across the processes.
  const ShellRun stats = sh("\"$K\" stats --json");
  ASSERT_EQ(stats.rc, 0) << stats.err;
  const auto nvrtc = nlohmann::json::parse(stats.out)["interposed"]["nvrtc"];
  EXPECT_EQ(nvrtc["hits"], 4) << stats.out;
  EXPECT_EQ(nvrtc["compiles"], 4) << stats.out;
  EXPECT_EQ(nvrtc["uncached"], 0) << stats.out;
  EXPECT_EQ(nvrtc["fallbacks"], 0) << stats.out;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["interposed"]["nvjitlink"]["hits"], 2) << stats.out;
}

INSTANTIATE_TEST_SUITE_P(Loadings, RunInterposeLoading,
                         ::testing::Values(Loading::linked, Loading::soname, Loading::path, Loading::deepbind,
                                           Loading::deepbind_plugin),
                         [](const auto& p) { return loading_name(p.param); });

TEST_F(RunInterpose, EditedDiskHeaderIsAMiss) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(run(client(Loading::path, "first.out"), "first.log").rc, 0);
  write_file(dir() / "inc" / "disk.h", "#pragma once\n#define DISK_OFFSET 6\n");
  ASSERT_EQ(sh("env " + client(Loading::path, "plain.out")).rc, 0);
  const ShellRun edited = run(client(Loading::path, "edited.out"), "edited.log");
  ASSERT_EQ(edited.rc, 0) << edited.err;
  EXPECT_EQ(file("edited.out"), file("plain.out"));
  EXPECT_NE(file("edited.out"), file("first.out"));
  EXPECT_EQ(count(file("edited.log"), "compile"), 4U) << file("edited.log");  // the broken one read it too
  EXPECT_EQ(count(file("edited.log"), "hit"), 0U) << file("edited.log");

  // `kcache why-miss` names the header between the two interposed compiles of kernels.cu.
  const auto first_key = [](const std::string& log) {
    const auto at = log.find(" nvrtc compile ");
    return at == std::string::npos ? std::string() : log.substr(at + 15, 64);
  };
  const ShellRun why = sh("\"$K\" why-miss " + first_key(file("first.log")) + " " + first_key(file("edited.log")));
  EXPECT_EQ(why.rc, 0) << why.err;
  EXPECT_NE(why.out.find("1 field(s) differ"), std::string::npos) << why.out;
  EXPECT_NE(why.out.find("disk_header:inc/disk.h"), std::string::npos) << why.out;
}

// As `kcache compile`: the working directory is not in the key (NVRTC does not
// write it into these outputs), so a checkout elsewhere with the same relative
// include path hits; a different header there would miss (EditedDiskHeaderIsAMiss).
TEST_F(RunInterpose, AnotherWorkingDirectoryHitsLikeKcacheCompile) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(run(client(Loading::path, "first.out"), "first.log").rc, 0);
  fs::create_directories(dir() / "elsewhere" / "inc");
  fs::copy_file(dir() / "inc" / "disk.h", dir() / "elsewhere" / "inc" / "disk.h");
  const ShellRun moved = sh("cd elsewhere && env " + k_sanitizer_preload + "KCACHE_INTERPOSE_LOG=../moved.log \"$K\" run -- env " +
                            client(Loading::path, "../moved.out"));
  ASSERT_EQ(moved.rc, 0) << moved.err;
  EXPECT_EQ(file("moved.out"), file("first.out"));
  EXPECT_EQ(count(file("moved.log"), "compile"), 0U) << file("moved.log");
  EXPECT_EQ(count(file("moved.log"), "hit"), 4U) << file("moved.log");
}

TEST_F(RunInterpose, ManyThreadsInOneProcessCompileEachKeyOnce) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(sh("env " + client(Loading::path, "plain.out", 8)).rc, 0);
  const ShellRun cold = run(client(Loading::path, "cold.out", 8), "cold.log");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(file("cold.out"), file("plain.out"));
  // Eight threads, four distinct keys: single-flight compiles each once.
  EXPECT_EQ(count(file("cold.log"), "compile"), 4U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "hit"), 4U) << file("cold.log");
  const ShellRun warm = run(client(Loading::path, "warm.out", 8), "warm.log");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(file("warm.out"), file("plain.out"));
  EXPECT_EQ(count(file("warm.log"), "compile"), 0U) << file("warm.log");
}

// A single-threaded program stays single-threaded under kcache run: the local
// put is made on its thread (a background put thread would make glibc lock
// every stdio call NVRTC makes from then on; docs/run.md).
TEST_F(RunInterpose, ASingleThreadedProgramGetsNoThreadFromTheStandIn) {
  KCACHE_REQUIRE_TOOLKIT();
  KCACHE_SKIP_UNDER_SANITIZERS("the sanitizer runtimes start threads of their own");
  ASSERT_EQ(sh("env KCACHE_TEST_THREADS_FILE=plain.threads " + client(Loading::path, "plain.out")).rc, 0);
  ASSERT_NE(file("plain.threads").find("Threads:"), std::string::npos);
  const ShellRun cold = run(client(Loading::path, "cold.out"), "cold.log", "KCACHE_TEST_THREADS_FILE=cold.threads");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(count(file("cold.log"), "compile"), 4U) << file("cold.log");
  EXPECT_EQ(file("cold.threads"), file("plain.threads"));
  // Entries were published all the same: a second run compiles nothing.
  const ShellRun warm = run(client(Loading::path, "warm.out"), "warm.log");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(count(file("warm.log"), "compile"), 0U) << file("warm.log");
  EXPECT_EQ(file("warm.out"), file("plain.out"));
}

TEST_F(RunInterpose, DisabledCacheIsTheRealLibraryAlone) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(sh("env " + client(Loading::soname, "plain.out")).rc, 0);
  const ShellRun off = run(client(Loading::soname, "off.out"), "off.log", "KCACHE_DISABLE=1");
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_EQ(warnings(off.err), 0U) << off.err;
  EXPECT_EQ(file("off.out"), file("plain.out"));
  EXPECT_EQ(count(file("off.log"), "compile") + count(file("off.log"), "hit"), 0U) << file("off.log");
  EXPECT_FALSE(fs::exists(cache() / "v1" / "entries"));
}

TEST_F(RunInterpose, DamagedEntriesAreMissesWithTheRealBytes) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(sh("env " + client(Loading::path, "plain.out")).rc, 0);
  ASSERT_EQ(run(client(Loading::path, "cold.out"), "cold.log").rc, 0);
  // One flipped byte in the middle of every payload.
  std::size_t damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache() / "v1" / "entries")) {
    if (e.is_regular_file() && e.path().extension() != ".pass") {
      std::string bytes = read_file(e.path());
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
      write_file(e.path(), bytes);
      ++damaged;
    }
  }
  ASSERT_EQ(damaged, 7U);  // four compiles (one a failure), two links, one NVVM compile
  const ShellRun again = run(client(Loading::path, "again.out"), "again.log");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(file("again.out"), file("plain.out"));
  EXPECT_EQ(count(file("again.log"), "compile"), 4U) << file("again.log");
  EXPECT_EQ(count(file("again.log"), "hit"), 0U) << file("again.log");
  EXPECT_EQ(count(file("again.log"), "compile", "nvjitlink"), 2U) << file("again.log");
}

TEST_F(RunInterpose, ReadOnlyCacheStillHitsAndCompilesWhatItCannotStore) {
  KCACHE_REQUIRE_TOOLKIT();
  // Root ignores file modes: the cache belongs to nobody, who runs the program.
  fs::permissions(root(), fs::perms::all);
  fs::permissions(dir(), fs::perms::all);
  ASSERT_EQ(sh("mkdir -p \"$KCACHE_DIR\" && chown 65534 \"$KCACHE_DIR\" && chmod -R a+rwX inc").rc, 0);
  ASSERT_EQ(sh(k_nobody + "env " + client(Loading::path, "plain.out")).rc, 0);
  ASSERT_EQ(run(client(Loading::path, "cold.out"), "cold.log", k_nobody).rc, 0);
  ASSERT_EQ(sh("chmod -R a-w \"$KCACHE_DIR\"").rc, 0);
  const ShellRun warm = run(client(Loading::path, "warm.out"), "warm.log", k_nobody);
  EXPECT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(warnings(warm.err), 0U) << warm.err << "cold:\n" << file("cold.log") << "warm:\n" << file("warm.log");
  EXPECT_EQ(file("warm.out"), file("plain.out"));
  EXPECT_EQ(count(file("warm.log"), "hit"), 4U) << file("warm.log");
  // A miss in a read-only cache: compiled by the real library, one warning.
  write_file(dir() / "inc" / "disk.h", "#pragma once\n#define DISK_OFFSET 7\n");
  ASSERT_EQ(sh(k_nobody + "env " + client(Loading::path, "plain2.out")).rc, 0);
  const ShellRun miss = run(client(Loading::path, "miss.out"), "miss.log", k_nobody);
  EXPECT_EQ(miss.rc, 0) << miss.err;
  EXPECT_EQ(warnings(miss.err), 1U) << miss.err;
  EXPECT_EQ(file("miss.out"), file("plain2.out"));
  sh("chmod -R u+w \"$KCACHE_DIR\"");
}

TEST_F(RunInterpose, RemoteThatIsDownAndBadSettingsChangeNothing) {
  KCACHE_REQUIRE_TOOLKIT();
  ASSERT_EQ(sh("env " + client(Loading::soname, "plain.out")).rc, 0);
  const std::string down = "KCACHE_REMOTE=redis://127.0.0.1:" + std::to_string(free_port());
  const ShellRun remote = run(client(Loading::soname, "remote.out"), "remote.log", down);
  ASSERT_EQ(remote.rc, 0) << remote.err;
  EXPECT_LE(warnings(remote.err), 1U) << remote.err;
  EXPECT_EQ(file("remote.out"), file("plain.out"));
  EXPECT_EQ(count(file("remote.log"), "compile"), 4U) << file("remote.log");
  // The disk tier still kept them.
  const ShellRun local = run(client(Loading::soname, "local.out"), "local.log", down);
  ASSERT_EQ(local.rc, 0) << local.err;
  EXPECT_EQ(file("local.out"), file("plain.out"));
  EXPECT_EQ(count(file("local.log"), "hit"), 4U) << file("local.log");

  const ShellRun bad = run(client(Loading::soname, "bad.out"), "bad.log", "KCACHE_MAX_SIZE=lots");
  ASSERT_EQ(bad.rc, 0) << bad.err;
  EXPECT_EQ(warnings(bad.err), 1U) << bad.err;
  EXPECT_NE(bad.err.find("KCACHE_MAX_SIZE"), std::string::npos) << bad.err;
  EXPECT_EQ(file("bad.out"), file("plain.out"));
}

TEST_F(RunInterpose, ExitStatusIsTheProgramsAndPreloadIsKept) {
  KCACHE_SKIP_UNDER_SANITIZERS("runs sh under the stand-in and checks LD_PRELOAD as a user sets it");
  EXPECT_EQ(sh("\"$K\" run -- sh -c 'exit 7'").rc, 7);
  const ShellRun missing = sh("\"$K\" run -- ./no-such-program");
  EXPECT_EQ(missing.rc, 127);
  EXPECT_NE(missing.err.find("cannot run ./no-such-program"), std::string::npos) << missing.err;
  EXPECT_EQ(sh("\"$K\" run").rc, 2);
  // The stand-in is appended to an existing LD_PRELOAD, once.
  const std::string lib = fs::canonical(KCACHE_INTERPOSE_LIBRARY_PATH).string();
  const ShellRun env = sh("\"$K\" run -- sh -c 'echo \"$LD_PRELOAD\"'");
  EXPECT_EQ(env.out, lib + "\n") << env.err;
  const ShellRun twice = sh("LD_PRELOAD=" + lib + " \"$K\" run -- sh -c 'echo \"$LD_PRELOAD\"'");
  EXPECT_EQ(twice.out, lib + "\n") << twice.err;
  // --print-env: the cache directory wherever it came from (here KCACHE_DIR), the stand-in, and the
  // Triton variables (the start-up module beside the stand-in first on PYTHONPATH).
  const std::string startup = (fs::path(lib).parent_path() / "python-startup").string();
  const ShellRun print = sh("\"$K\" run --print-env");
  EXPECT_EQ(print.rc, 0);
  // With KCACHE_RUN_NVCC (the kcache executable: nvcc runs through it, docs/nvcc.md).
  const std::string self = fs::canonical(KCACHE_CLI_PATH).string();
  EXPECT_EQ(print.out, "export KCACHE_DIR='" + cache().string() + "'\nexport KCACHE_RUN_NVCC='" + self +
                           "'\nexport LD_PRELOAD='" + lib + "'\nexport KCACHE_TRITON='1'\nexport PYTHONPATH='" +
                           startup + "'\n");
  const ShellRun flag = sh("env -u KCACHE_DIR KCACHE_TRITON=0 \"$K\" --cache-dir elsewhere run --print-env");
  EXPECT_EQ(flag.out, "export KCACHE_DIR='" + (dir() / "elsewhere").string() + "'\nexport KCACHE_RUN_NVCC='" + self +
                          "'\nexport LD_PRELOAD='" + lib + "'\n");
  const ShellRun none = sh("env -u KCACHE_DIR \"$K\" run --print-env");
  EXPECT_EQ(none.out.find("KCACHE_DIR"), std::string::npos) << none.out;  // the default: the same for the launcher
}

// The number of summary lines in `err`, and the first.
std::pair<std::size_t, std::string> summary(const std::string& err) {
  std::size_t n = 0;
  std::string first;
  for (std::size_t at = err.find("kcache run: "); at != std::string::npos; at = err.find("kcache run: ", at + 1)) {
    if (n++ == 0) {
      first = err.substr(at, err.find('\n', at) - at);
    }
  }
  return {n, first};
}

TEST_F(RunInterpose, TheSummarySaysWhatTheRunSawServedAndCompiled) {
  KCACHE_REQUIRE_TOOLKIT();
  // The client: four NVRTC compiles (one broken: stored as a failure), two links, two NVVM compiles (one with a
  // bad option: uncached).
  const ShellRun cold = run(client(Loading::path, "cold.out"), "cold.log");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  using Summary = std::pair<std::size_t, std::string>;
  EXPECT_EQ(summary(cold.err),
            Summary(1, "kcache run: 8 JIT compiles seen: 0 served, 7 compiled, 1 compiled without the cache"))
      << cold.err;
  const ShellRun warm = run(client(Loading::path, "warm.out"), "warm.log");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  const auto [lines, line] = summary(warm.err);
  EXPECT_EQ(lines, 1U) << warm.err;
  EXPECT_EQ(line.rfind("kcache run: 8 JIT compiles seen: 7 served (7 disk; 1 of a failed compile), 0 compiled, 1 "
                       "compiled without the cache; ",
                       0),
            0U)
      << line;
  EXPECT_NE(line.find(" of compiling saved"), std::string::npos) << line;
  // Every process of the run counts: two clients under one shell (the top process), one line.
  write_file(dir() / "two.sh", client(Loading::path, "a.out") + "\n" + client(Loading::path, "b.out") + "\n");
  const ShellRun two = sh(k_sanitizer_preload + "\"$K\" run -- bash two.sh");
  ASSERT_EQ(two.rc, 0) << two.err;
  const auto [two_lines, two_line] = summary(two.err);
  EXPECT_EQ(two_lines, 1U) << two.err;
  EXPECT_EQ(two_line.rfind("kcache run: 16 JIT compiles seen: 14 served (14 disk; 2 of a failed compile), 0 compiled, "
                           "2 compiled without the cache; ",
                           0),
            0U)
      << two_line;
  // `kcache stats` counts the same requests, route "run".
  const ShellRun stats = sh("\"$K\" stats --json");
  ASSERT_EQ(stats.rc, 0) << stats.err;
  const auto run_route = nlohmann::json::parse(stats.out)["requests"]["routes"]["run"];
  EXPECT_EQ(run_route["total"], 32) << stats.out;
  EXPECT_EQ(run_route["served"]["disk"], 21) << stats.out;
  EXPECT_EQ(run_route["served"]["failed"], 3) << stats.out;
  EXPECT_EQ(run_route["compiled"], 7) << stats.out;
  EXPECT_EQ(run_route["uncached"], 4) << stats.out;
}

TEST_F(RunInterpose, NothingSeenIsSaidPlainlyAndTheSummaryTurnsOff) {
  KCACHE_SKIP_UNDER_SANITIZERS("runs `true`, not built with the sanitizer");
  const ShellRun none = sh("\"$K\" run -- true");
  EXPECT_EQ(none.rc, 0) << none.err;
  const auto [lines, line] = summary(none.err);
  EXPECT_EQ(lines, 1U) << none.err;
  EXPECT_EQ(line.rfind("kcache run: no JIT compile seen", 0), 0U) << line;
  EXPECT_NE(line.find("statically (Warp does)"), std::string::npos) << line;
  EXPECT_NE(line.find("Triton runs ptxas"), std::string::npos) << line;
  EXPECT_EQ(warnings(none.err), 0U) << none.err;
  // The exit status stays the program's, and the line comes after its own output.
  const ShellRun status = sh("\"$K\" run -- sh -c 'echo mine >&2; exit 3'");
  EXPECT_EQ(status.rc, 3);
  EXPECT_EQ(status.err.rfind("mine\nkcache run: no JIT compile seen", 0), 0U) << status.err;
  for (const std::string off : {"\"$K\" run --no-summary -- true", "KCACHE_RUN_SUMMARY=0 \"$K\" run -- true",
                                "\"$K\" --set run_summary=false run -- true"}) {
    const ShellRun quiet = sh(off);
    EXPECT_EQ(quiet.rc, 0) << off << ": " << quiet.err;
    EXPECT_EQ(quiet.err, "") << off;
  }
}

}  // namespace
}  // namespace kcache::test
