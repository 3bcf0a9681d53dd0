// Failed compiles under `kcache run` (docs/run.md, "Failed compiles"): jitify2's
// preprocessing, whose compiles end on `#include <__JITIFY_STOP_COMPILATION>`
// and fail on purpose, is served from the cache from the second process on,
// with exactly what NVRTC returned (codes, log, what the getters give after a
// failed compile); a header that appears later where the compile searched
// makes it a miss, which compiles what NVRTC now gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

// The number of interposed NVRTC calls in `log` (KCACHE_INTERPOSE_LOG) that ended with `event`.
std::size_t count(const std::string& log, const std::string& event) {
  const std::string word = " nvrtc " + event + " ";
  std::size_t n = 0;
  for (std::size_t at = log.find(word); at != std::string::npos; at = log.find(word, at + 1)) {
    ++n;
  }
  return n;
}

class RunFailedCompiles : public CliShell {
 protected:
  void SetUp() override {
#ifdef KCACHE_INTERPOSE_SANITIZED
    GTEST_SKIP() << "sanitizer build: the stand-in is preloaded into a client built apart";
#endif
    CliShell::SetUp();
    fs::create_directories(dir() / "inc");
    write_file(dir() / "inc" / "widget.h", "#pragma once\n#define WIDGET 5\n");
  }

  // The client's command line writing to `out`; empty when it was not built.
  static std::string client(const std::string& out) {
#ifdef KCACHE_JITIFY_CLIENT
    return std::string(KCACHE_JITIFY_CLIENT) + " inc " + out;
#else
    static_cast<void>(out);
    return {};
#endif
  }

  // Runs the client under `kcache run`, its interposed calls logged to `log`.
  ShellRun run(const std::string& out, const std::string& log) {
    return sh("env KCACHE_INTERPOSE_LOG=" + log + " \"$K\" run -- " + client(out));
  }

  std::string file(const std::string& name) { return read_file(dir() / name); }

  // The requests of the route "run" in `kcache stats --json`.
  nlohmann::json run_requests() {
    const ShellRun stats = sh("\"$K\" stats --json");
    EXPECT_EQ(stats.rc, 0) << stats.err;
    return nlohmann::json::parse(stats.out)["requests"]["routes"]["run"];
  }
};

TEST_F(RunFailedCompiles, JitifyPreprocessingIsServedWithTheSameCodesAndLog) {
  KCACHE_REQUIRE_TOOLKIT();
  if (client("x").empty()) {
    if (toolkit_required()) {
      FAIL() << "KCACHE_REQUIRE_TOOLKIT=1 but the jitify client (linked with -lnvrtc) was not built";
    }
    GTEST_SKIP() << "no client linked with -lnvrtc (no libnvrtc at configure time)";
  }
  const ShellRun plain = sh(client("plain.out"));
  ASSERT_EQ(plain.rc, 0) << plain.err << file("plain.out");
  // Two preprocessing compiles fail (a header jitify supplies, then the stop header), one compiles.
  ASSERT_NE(file("plain.out").find("cannot open source file \"gadget.h\""), std::string::npos) << file("plain.out");
  ASSERT_NE(file("plain.out").find("cannot open source file \"__JITIFY_STOP_COMPILATION\""), std::string::npos);
  ASSERT_NE(file("plain.out").find("\npreprocessed\n"), std::string::npos) << file("plain.out");

  // Process 1 compiles all three and stores them, the failures as negative entries.
  const ShellRun cold = run("cold.out", "cold.log");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(file("cold.out"), file("plain.out"));
  EXPECT_EQ(count(file("cold.log"), "compile"), 3U) << file("cold.log");
  EXPECT_EQ(count(file("cold.log"), "uncached"), 0U) << file("cold.log");

  // Process 2: everything served, the failures with the same codes, log and getters.
  const ShellRun warm = run("warm.out", "warm.log");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(file("warm.out"), file("plain.out"));
  EXPECT_EQ(count(file("warm.log"), "hit"), 3U) << file("warm.log");
  EXPECT_EQ(count(file("warm.log"), "compile"), 0U) << file("warm.log");
  auto requests = run_requests();
  EXPECT_EQ(requests["compiled"], 3) << requests;
  EXPECT_EQ(requests["served"]["total"], 3) << requests;
  EXPECT_EQ(requests["served"]["failed"], 2) << requests;
  EXPECT_EQ(requests["failed"], 0) << requests;
  // The run's summary says so too.
  EXPECT_NE(warm.err.find("3 served (3 disk; 2 of a failed compile), 0 compiled"), std::string::npos) << warm.err;

  // A stop header in the source's directory: NVRTC does not search it for <...>; the same result.
  write_file(dir() / "__JITIFY_STOP_COMPILATION", "");
  const ShellRun beside = run("beside.out", "beside.log");
  ASSERT_EQ(beside.rc, 0) << beside.err;
  EXPECT_EQ(file("beside.out"), file("plain.out"));
  fs::remove(dir() / "__JITIFY_STOP_COMPILATION");

  // The stop header appears in the -I directory: both preprocessing compiles
  // searched it, so both miss; the second now succeeds, as NVRTC says.
  write_file(dir() / "inc" / "__JITIFY_STOP_COMPILATION", "");
  const ShellRun plain2 = sh(client("plain2.out"));
  ASSERT_EQ(plain2.rc, 0) << plain2.err << file("plain2.out");
  ASSERT_NE(file("plain2.out").find("preprocessed: the stop header was found"), std::string::npos);
  const ShellRun found = run("found.out", "found.log");
  ASSERT_EQ(found.rc, 0) << found.err;
  EXPECT_EQ(file("found.out"), file("plain2.out"));
  EXPECT_EQ(count(file("found.log"), "compile"), 2U) << file("found.log");
  EXPECT_EQ(count(file("found.log"), "hit"), 1U) << file("found.log");  // the real compile read no stop header
}

// A damaged negative entry is a miss: the real library compiles and the
// program gets what it gives, never the damaged record.
TEST_F(RunFailedCompiles, DamagedNegativeEntryIsAMiss) {
  KCACHE_REQUIRE_TOOLKIT();
  if (client("x").empty()) {
    GTEST_SKIP() << "no client linked with -lnvrtc";
  }
  ASSERT_EQ(sh(client("plain.out")).rc, 0);
  ASSERT_EQ(run("cold.out", "cold.log").rc, 0);
  std::size_t damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache() / "v1" / "entries")) {
    if (e.is_regular_file() && e.path().extension() == ".pass" &&
        read_file(e.path()).find("\"failed\":\"6\"") != std::string::npos) {
      fs::path payload = e.path();
      payload.replace_extension();
      std::string bytes = read_file(payload);
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
      write_file(payload, bytes);
      ++damaged;
    }
  }
  ASSERT_EQ(damaged, 2U);
  const ShellRun again = run("again.out", "again.log");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(file("again.out"), file("plain.out"));
  EXPECT_EQ(count(file("again.log"), "compile"), 2U) << file("again.log");
  EXPECT_EQ(count(file("again.log"), "hit"), 1U) << file("again.log");
}

}  // namespace
}  // namespace kcache::test
