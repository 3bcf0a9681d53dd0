// Where kcache writes: -o of get, compile and link never replaces what is not
// a regular file, `-o -` is stdout, and a lost write (to -o or to stdout) is
// exit 1 naming the output. Two inputs never share one output.
#include <gtest/gtest.h>

#include <string>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

using CliOutput = CliShell;

const std::string k_payload = "payload bytes\n";

TEST_F(CliOutput, GetIntoACharacterDeviceWritesThroughItAndLeavesItADevice) {
  const std::string key = put("f", k_payload);
  const ShellRun r = sh("mknod null c 1 3 && \"$K\" get " + key + " -o null");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(type_of(dir() / "null"), S_IFCHR) << "the device node was replaced";
  // A directory is refused by name, whatever the output kind.
  const ShellRun d = sh("mkdir d && \"$K\" get " + key + " -o d");
  EXPECT_EQ(d.rc, 1) << d.err;
  EXPECT_NE(d.err.find("d: Is a directory"), std::string::npos) << d.err;
}

TEST_F(CliOutput, GetIntoAFullDeviceIsExit1NamingTheOutputNotTheCache) {
  const std::string key = put("f", k_payload);
  const ShellRun r = sh("mknod full c 1 7 && \"$K\" get " + key + " -o full");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("full: No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the cache is not affected"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("prune"), std::string::npos) << "the hint must not blame the cache: " << r.err;
  EXPECT_EQ(type_of(dir() / "full"), S_IFCHR);
}

TEST_F(CliOutput, GetIntoAFifoFeedsItsReaderAndLeavesAFifo) {
  const std::string key = put("f", k_payload);
  const ShellRun r = sh("mkfifo ff && { timeout 20 cat ff > got & } && \"$K\" get " + key + " -o ff; rc=$?; wait; exit $rc");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(type_of(dir() / "ff"), S_IFIFO);
  EXPECT_EQ(read_file(dir() / "got"), k_payload);
}

TEST_F(CliOutput, GetIntoAFifoWhoseReaderLeftIsExit1NamingIt) {
  const std::string big(1 << 20, 'x');  // more than a pipe holds: the writer meets EPIPE
  const std::string key = put("f", big);
  const ShellRun r = sh("mkfifo ff && { timeout 20 head -c1 ff > /dev/null & } && \"$K\" get " + key +
                        " -o ff; rc=$?; wait; exit $rc");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("ff: Broken pipe"), std::string::npos) << r.err;
}

TEST_F(CliOutput, GetThroughASymlinkWritesItsTargetAndKeepsTheLink) {
  const std::string key = put("f", k_payload);
  write_file(dir() / "target", "old content that is longer than the payload\n");
  const ShellRun r = sh("ln -s target lnk && ln -s missing dangling && \"$K\" get " + key + " -o lnk && \"$K\" get " +
                        key + " -o dangling");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(type_of(dir() / "lnk"), S_IFLNK);
  EXPECT_EQ(read_file(dir() / "target"), k_payload);
  EXPECT_EQ(type_of(dir() / "dangling"), S_IFLNK);
  EXPECT_EQ(read_file(dir() / "missing"), k_payload) << "a dangling link's target is created, as a compiler does";
}

TEST_F(CliOutput, GetDashIsStandardOutput) {
  const std::string key = put("f", k_payload);
  const ShellRun r = sh("\"$K\" get " + key + " -o -");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, k_payload);
  EXPECT_FALSE(fs::exists(dir() / "-"));
}

TEST_F(CliOutput, EveryPrintingCommandNoticesALostStdoutWrite) {
  const std::string key = put("f", k_payload);
  // Each command, with stdout on a full device, closed, and on a pipe whose reader left.
  const std::vector<std::string> commands{"ls",     "ls --json", "stats",      "stats --json", "show " + key,
                                          "get " + key, "put f", "config", "verify", "--json clear"};
  for (const auto& cmd : commands) {
    const ShellRun full = sh("\"$K\" " + cmd + " > /dev/full");
    EXPECT_EQ(full.rc, 1) << cmd << ": " << full.err;
    EXPECT_NE(full.err.find("cannot write to standard output"), std::string::npos) << cmd << ": " << full.err;
    const ShellRun closed = sh("\"$K\" " + cmd + " >&-");
    EXPECT_EQ(closed.rc, 1) << cmd << ": " << closed.err;
    EXPECT_NE(closed.err.find("standard output"), std::string::npos) << cmd << ": " << closed.err;
    put("f", k_payload);  // `clear` emptied the cache
  }
  const std::string big_key = put("big", std::string(1 << 20, 'y'));
  const ShellRun piped = sh("\"$K\" get " + big_key + " | head -c1 > /dev/null; exit ${PIPESTATUS[0]}");
  EXPECT_EQ(piped.rc, 1) << piped.err;
  EXPECT_NE(piped.err.find("standard output: Broken pipe"), std::string::npos) << piped.err;
}

TEST_F(CliOutput, CompileAndLinkWriteDevicesInPlaceAndDashToStdout) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const ShellRun r = sh("mknod null c 1 3 && mknod full c 1 7 && \"$K\" compile " + src +
                        " --target ptx --arch sm_90 -o k.ptx && \"$K\" compile " + src +
                        " --target cubin --arch sm_90 -o null && \"$K\" link k.ptx --arch sm_90 -o null && "
                        "\"$K\" compile " + src + " --target cubin --arch sm_90 -o - > dash.cubin");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(type_of(dir() / "null"), S_IFCHR);
  EXPECT_EQ(read_file(dir() / "dash.cubin").substr(0, 4), "\x7f" "ELF");
  const ShellRun compile_full = sh("\"$K\" compile " + src + " --target cubin --arch sm_90 -o full");
  EXPECT_EQ(compile_full.rc, 1) << compile_full.err;
  EXPECT_NE(compile_full.err.find("full: No space left on device"), std::string::npos) << compile_full.err;
  const ShellRun link_full = sh("\"$K\" link k.ptx --arch sm_90 -o full");
  EXPECT_EQ(link_full.rc, 1) << link_full.err;
  EXPECT_NE(link_full.err.find("full: No space left on device"), std::string::npos) << link_full.err;
  EXPECT_EQ(type_of(dir() / "full"), S_IFCHR);
}

TEST_F(CliOutput, CompileRefusesTwoInputsWithOneOutputNamingBoth) {
  const std::string kernel = "extern \"C\" __global__ void k(int* p) { *p = 1; }\n";
  fs::create_directories(dir() / "s3");
  fs::create_directories(dir() / "s4");
  write_file(dir() / "s3" / "k.cu", kernel);
  write_file(dir() / "s4" / "k.cu", kernel + "// the second one\n");
  for (const std::string jobs : {"1", "2"}) {
    const ShellRun r = sh("\"$K\" compile s3/k.cu s4/k.cu --arch sm_90 -j " + jobs);
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_NE(r.err.find("s3/k.cu and s4/k.cu would both be written to k.cubin"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir() / "k.cubin")) << "nothing is compiled when the outputs collide";
  }
  // An output that would overwrite an input is refused too.
  write_file(dir() / "x.ptx", kernel);
  const ShellRun over = sh("\"$K\" compile x.ptx --target ptx --arch sm_90");
  EXPECT_EQ(over.rc, 2) << over.err;
  EXPECT_NE(over.err.find("would overwrite the input x.ptx"), std::string::npos) << over.err;
  EXPECT_EQ(read_file(dir() / "x.ptx"), kernel);
  // The input under another name (a symlink given as -o) is the input too.
  fs::create_symlink("x.ptx", dir() / "link.ptx");
  const ShellRun via_link = sh("\"$K\" compile x.ptx --target ptx --arch sm_90 -o link.ptx");
  EXPECT_EQ(via_link.rc, 2) << via_link.err;
  EXPECT_NE(via_link.err.find("would overwrite the input x.ptx"), std::string::npos) << via_link.err;
  EXPECT_EQ(read_file(dir() / "x.ptx"), kernel);
}

TEST_F(CliOutput, CompilePrintsOneLineOnATerminalAndNothingElsewhere) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const std::string compile = "\"$K\" compile " + src + " --arch sm_90";
  // `script` gives the command a terminal as stdout; its own output is the terminal's.
  const ShellRun cold = sh("script -qec '" + compile + "' /dev/null");
  EXPECT_EQ(cold.rc, 0) << cold.err;
  EXPECT_NE(cold.out.find(src + " -> trivial.cubin: compiled (miss), "), std::string::npos) << cold.out;
  const ShellRun warm = sh("script -qec '" + compile + "' /dev/null");
  EXPECT_NE(warm.out.find(src + " -> trivial.cubin: hit, "), std::string::npos) << warm.out;
  EXPECT_NE(warm.out.find(" ms"), std::string::npos) << warm.out;
  const ShellRun quiet = sh("script -qec '" + compile + " -q' /dev/null");
  EXPECT_EQ(quiet.rc, 0);
  EXPECT_EQ(quiet.out.find("trivial.cubin"), std::string::npos) << quiet.out;
  const ShellRun piped = sh(compile);
  EXPECT_EQ(piped.rc, 0) << piped.err;
  EXPECT_EQ(piped.out, "") << "not a terminal: scripts get clean output";
}

TEST_F(CliOutput, PlanFillsWhatHostOmitsFromWhatWasProbedAndSaysWhichHost) {
  KCACHE_REQUIRE_TOOLKIT();  // the CUDA version is probed from the toolkit
  write_file(dir() / "plan.toml", "version = 1\n[[entry]]\nname = \"a\"\nbuilder = \"command\"\n"
                                  "command = [\"sh\", \"-c\", \"echo > {output}\"]\n");
  const ShellRun given = sh("\"$K\" plan show plan.toml --host sm=90");
  ASSERT_EQ(given.rc, 0) << given.err;
  EXPECT_NE(given.out.find("host:   sm=90,"), std::string::npos) << given.out;
  EXPECT_EQ(given.out.find("cuda=na"), std::string::npos) << "the probed CUDA version was dropped: " << given.out;
  EXPECT_NE(given.err.find("kcache: host sm=90,"), std::string::npos) << given.err;
  EXPECT_NE(given.err.find("(sm from --host, the rest probed)"), std::string::npos) << given.err;
  const ShellRun explicit_na = sh("\"$K\" plan show plan.toml --host sm=90,cuda=na");
  EXPECT_NE(explicit_na.out.find("cuda=na"), std::string::npos) << explicit_na.out;
  const ShellRun probed = sh("\"$K\" plan build plan.toml --no-cache");
  EXPECT_NE(probed.err.find("kcache: host sm="), std::string::npos) << probed.err;
  EXPECT_NE(probed.err.find("(probed)"), std::string::npos) << probed.err;
}

}  // namespace
}  // namespace kcache::test
