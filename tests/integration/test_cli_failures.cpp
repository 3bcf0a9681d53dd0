// Failure is reported as failure, with the documented prefix, hint and exit
// code: clear/prune on a cache they cannot write, links nvJitLink only
// complains about on stderr, plan numbers out of range, inputs that are not
// regular files, and one exit-code table for every command (docs/cli.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

using CliFailure = CliShell;

const std::string k_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups";

TEST_F(CliFailure, ClearAndPruneOfACacheTheyCannotWriteSayWhatFailedAndExit1) {
  fs::permissions(root(), fs::perms::all);
  fs::permissions(dir(), fs::perms::all);
  const ShellRun r = sh("mkdir -p \"$KCACHE_DIR\" && chown 65534 \"$KCACHE_DIR\" && for i in 1 2 3; do echo $i > f$i; " +
                        k_nobody + " \"$K\" put f$i > /dev/null || exit 90; done; chmod -R a-w \"$KCACHE_DIR/v1/entries\"");
  ASSERT_EQ(r.rc, 0) << r.err;
  const ShellRun clear = sh(k_nobody + " \"$K\" clear");
  EXPECT_EQ(clear.rc, 1) << clear.out << clear.err;
  EXPECT_NE(clear.err.find("kcache: error: permission_denied: cannot clear the cache at " + cache().string() +
                           ": 3 entries could not be removed"),
            std::string::npos)
      << clear.err;
  EXPECT_EQ(clear.out.find("removed"), std::string::npos) << "no success line: " << clear.out;
  const ShellRun prune = sh(k_nobody + " \"$K\" prune --max-size 1");
  EXPECT_EQ(prune.rc, 1) << prune.out << prune.err;
  EXPECT_NE(prune.err.find("cannot prune the cache at"), std::string::npos) << prune.err;
  EXPECT_NE(prune.err.find("Permission denied"), std::string::npos) << prune.err;
  const ShellRun ls = sh(k_nobody + " \"$K\" ls --json");
  ASSERT_EQ(ls.rc, 0) << ls.err;
  EXPECT_EQ(nlohmann::json::parse(ls.out).size(), 3U);
  sh("chmod -R u+w \"$KCACHE_DIR\"");
}

TEST_F(CliFailure, LinkThatNvJitLinkOnlyComplainsAboutIsExit5AndCachesNothing) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  ASSERT_EQ(sh("\"$K\" compile " + src + " --target ptx --arch sm_90 -o k.ptx --no-cache").rc, 0);
  const ShellRun r = sh("\"$K\" link k.ptx k.ptx --arch sm_90 -o two.cubin");
  EXPECT_EQ(r.rc, 5) << r.err;
  EXPECT_NE(r.err.find("Multiple definition"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("@E@"), std::string::npos) << "nvJitLink's line tags are not for people: " << r.err;
  EXPECT_FALSE(fs::exists(dir() / "two.cubin"));
  const ShellRun ls = sh("\"$K\" ls --json");
  EXPECT_EQ(nlohmann::json::parse(ls.out).size(), 0U) << "a failed link cached something: " << ls.out;
  // nvJitLink glues an input's name to its type; kcache's message does not.
  write_file(dir() / "junk.cubin", "not a cubin");
  const ShellRun junk = sh("\"$K\" link junk.cubin --arch sm_90 -o j.cubin");
  EXPECT_EQ(junk.rc, 5) << junk.err;
  EXPECT_NE(junk.err.find("NVJITLINK_INPUT_CUBIN: junk.cubin"), std::string::npos) << junk.err;
  // A compile NVRTC rejects is exit 5; it is kept as a negative entry (docs/keys.md,
  // "Failed compiles"), and the next compile says exactly the same from it.
  write_file(dir() / "bad.cu", "__global__ void k( { }\n");
  const ShellRun bad = sh("\"$K\" compile bad.cu --arch sm_90");
  EXPECT_EQ(bad.rc, 5) << bad.err;
  EXPECT_NE(bad.err.find("kcache: error: compile_failed: "), std::string::npos) << bad.err;
  const auto entries = nlohmann::json::parse(sh("\"$K\" ls --json").out);
  ASSERT_EQ(entries.size(), 1U) << entries;
  EXPECT_EQ(entries[0]["kind"], "failed-compile") << entries;
  const ShellRun again = sh("\"$K\" compile bad.cu --arch sm_90");
  EXPECT_EQ(again.rc, bad.rc) << again.err;
  EXPECT_EQ(again.err, bad.err);
  EXPECT_FALSE(fs::exists(dir() / "bad.cubin"));
  const auto requests = nlohmann::json::parse(sh("\"$K\" stats --json").out)["requests"]["routes"]["cli"];
  EXPECT_EQ(requests["served"]["failed"], 1) << requests;
  EXPECT_EQ(requests["compiled"], 1) << requests;
}

TEST_F(CliFailure, PlanNumbersOutOfRangeAreRefusedAtTheirLine) {
  write_file(dir() / "plan.toml",
             "version = 1\n[defaults]\ntimeout_s = 18446744073709\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\n"
             "command = [\"sh\", \"-c\", \"echo > {output}\"]\nshapes = { x = [1, 99999999999] }\ntimeout_s = 604801\n");
  for (const std::string sub : {"check", "build"}) {
    const ShellRun r = sh("\"$K\" plan " + sub + " plan.toml");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("plan.toml:3: timeout_s = 18446744073709 is out of range; fix: write a whole number from 1 "
                         "to 604800"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("plan.toml:8: shape 'x' of entry 'a' has a dimension out of range (99999999999)"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("plan.toml:9: timeout_s = 604801 is out of range"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("kcache: error: invalid_argument: the plan is not valid"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("kcache: hint: "), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir() / "engines"));
}

TEST_F(CliFailure, AFifoOrADirectoryWhereAFileIsExpectedIsRefusedWithoutHanging) {
  // `timeout` turns a hang into exit 124 instead of a stuck test.
  const ShellRun r = sh("mkfifo ff ff.cu ff.ptx ff.onnx && mkdir somedir");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"why-miss ff ff", "ff is a FIFO"},           {"stamp ff.onnx", "ff.onnx is a FIFO"},
      {"stamp --check ff.onnx", "ff.onnx is a FIFO"}, {"inspect ff", "ff is a FIFO"},
      {"put ff", "ff is a FIFO"},                   {"compile ff.cu --arch sm_90", "ff.cu is a FIFO"},
      {"link ff.ptx --arch sm_90", "ff.ptx is a FIFO"}, {"plan check ff", "ff is a FIFO"},
      {"plan build ff", "ff is a FIFO"},            {"put somedir", "somedir is a directory"},
      {"plan build .", ". is a directory"},         {"stamp somedir", "somedir is a directory"},
      {"inspect somedir", "somedir is a directory"}, {"compile somedir --arch sm_90", "somedir is a directory"},
      {"stamp nope.onnx", "nope.onnx does not exist"}, {"inspect nope", "nope does not exist"},
      {"why-miss nope other", "nope does not exist"}, {"plan build nope.toml", "nope.toml does not exist"},
  };
  for (const auto& [args, says] : cases) {
    const ShellRun c = sh("timeout 10 \"$K\" " + args);
    EXPECT_EQ(c.rc, 1) << args << ": " << c.err;
    EXPECT_NE(c.err.find("kcache: error: "), std::string::npos) << args << ": " << c.err;
    EXPECT_NE(c.err.find(says), std::string::npos) << args << ": " << c.err;
    EXPECT_NE(c.err.find("kcache: hint: "), std::string::npos) << args << ": " << c.err;
  }
}

// One table (docs/cli.md, "Exit codes"), true for every command.
TEST_F(CliFailure, ExitCodeTableHoldsForEveryCommand) {
  const std::string key = put("f", "bytes\n");
  const std::string zeros(64, '0');
  write_file(dir() / "plan.toml", "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\n"
                                  "command = [\"sh\", \"-c\", \"echo > {output}\"]\n");
  write_file(dir() / "fail.toml", "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\n"
                                  "command = [\"sh\", \"-c\", \"exit 3 # {output}\"]\n");
  fs::create_directories(dir() / "somedir");
  ASSERT_EQ(sh("mknod full c 1 7").rc, 0);
  struct Row {
    std::string args;
    int rc;
  };
  const std::vector<Row> table{
      // 0: success
      {"get " + key + " -o out", 0},
      {"plan check plan.toml", 0},
      // 1: the operation failed (an input that is missing or not a file, an output that cannot be written)
      {"put nope.bin", 1},
      {"compile nope.cu --arch sm_90", 1},
      {"link nope.ptx --arch sm_90", 1},
      {"inspect nope", 1},
      {"stamp nope.onnx", 1},
      {"why-miss nope other", 1},
      {"plan check nope.toml", 1},
      {"plan build nope.toml", 1},
      {"put somedir", 1},
      {"get " + key + " -o full", 1},  // a local /dev/full: an unfixed kcache would replace the real one
      {"get " + key + " -o somedir", 1},
      // 2: bad usage or setting
      {"--config nope.toml ls", 2},
      {"--config nope.toml config", 2},
      {"--config nope.toml put f", 2},
      {"--max-size huge ls", 2},
      {"get not-a-key", 2},
      {"show not-a-key", 2},
      {"ls --no-such-flag", 2},
      {"no-such-command", 2},
      {"prune --max-size 0", 2},
      {"plan build plan.toml --host bogus", 2},
      {"stamp f.onnx --key short", 2},
      // 3: a miss
      {"get " + zeros, 3},
      {"show " + zeros, 3},
      // 7: a plan entry failed
      {"plan build fail.toml --host sm=87 --no-cache", 7},
  };
  for (const auto& row : table) {
    const ShellRun r = sh("timeout 60 \"$K\" " + row.args);
    EXPECT_EQ(r.rc, row.rc) << "kcache " << row.args << "\n" << r.err;
    if (row.rc != 0 && row.rc != 3 && row.rc != 7) {
      EXPECT_NE(r.err.find("kcache: error: "), std::string::npos) << row.args << ": " << r.err;
    }
  }
  // 4: verify finds a damaged entry.
  const std::string payload = (cache() / "v1" / "entries" / key.substr(0, 2) / key).string();
  ASSERT_EQ(sh("chmod u+w '" + payload + "'; printf 'BYTES\\n' > '" + payload + "'").rc, 0);
  EXPECT_EQ(sh("\"$K\" verify").rc, 4);
}

}  // namespace
}  // namespace kcache::test
