// The quick parser of `kcache compile` (cli/command.hpp) against CLI11: every
// spelling is run with KCACHE_CLI_PARSER=full (CLI11 only) and with the quick
// parser, in a fresh cache each, and must give the same exit code, stdout,
// stderr and output bytes. The spellings the quick parser takes are run with
// KCACHE_CLI_PARSER=quick, which fails instead of falling back, so a spelling
// that silently went to CLI11 fails the test; the others are run without the
// setting (the quick parser declines, CLI11 answers) and with =quick, which
// must then say the quick parser does not take them.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

using CliQuickParser = CliShell;

struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
  std::string output;  // the bytes of every file under out/, in name order
};

// Timings and times of day differ between two runs; everything else must not.
std::string without_times(const std::string& text) {
  static const std::regex times(R"re("(\w*_us|us|created_unix_ms)": [0-9]+)re");
  return std::regex_replace(text, times, "\"$1\": N");
}

}  // namespace

class CliQuickParserTest : public CliShell {
 protected:
  Outcome compile(const std::string& parser, const std::string& words) {
    const std::string setting = parser.empty() ? "" : "KCACHE_CLI_PARSER=" + parser + " ";
    const ShellRun r = sh("rm -rf out c && mkdir out && KCACHE_DIR=$PWD/c " + setting + "\"$K\" compile " + words);
    Outcome o{r.rc, without_times(r.out), without_times(r.err), {}};
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir() / "out")) {
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      o.output += f.filename().string() + ":" + read_file(f) + "\n";
    }
    return o;
  }

  void write_sources() {
    write_file(dir() / "k.cu",
               "#include \"inc.h\"\n"
               "extern \"C\" __global__ void k(float* p) { p[0] = VALUE + A; }\n"
               "template <int N> __global__ void t(int* p) { p[0] = N; }\n"
               "template __global__ void t<3>(int*);\n");
    fs::create_directories(dir() / "inc");
    write_file(dir() / "inc" / "inc.h", "#define VALUE 2.0f\n#ifndef A\n#define A 0\n#endif\n");
  }

  static void expect_same(const Outcome& full, const Outcome& other, const std::string& words) {
    EXPECT_EQ(full.rc, other.rc) << words << "\n" << full.err << "\n---\n" << other.err;
    EXPECT_EQ(full.out, other.out) << words;
    EXPECT_EQ(full.err, other.err) << words;
    EXPECT_EQ(full.output, other.output) << words;
  }
};

TEST_F(CliQuickParserTest, TakesThePlainSpellingsAndDoesWhatCli11Does) {
  KCACHE_REQUIRE_TOOLKIT();
  write_sources();
  const std::vector<std::string> spellings = {
      "k.cu --target ptx --arch sm_90 -I inc -o out/a.ptx",
      "--arch sm_90 k.cu -I inc -o out/a.cubin -D A=1 -D B",
      "k.cu -a sm_90 --target cubin --include-path inc --define-macro A=3 --output out/k.cubin --extra-digest x "
      "--no-cache -q",
      "k.cu --arch sm_90 --target ptx -I inc -o out/a.ptx -j 1 -e 't<3>' --name-expression k --explain",
      "k.cu --arch sm_90 --target ptx -I inc -o out/a.ptx --json",
      "k.cu --arch sm_90 --target ptx -I inc -o out/a.ptx -v --max-size 1G",
      "k.cu --arch sm_90 --target ltoir -I inc -o out/a.ltoir --cache-dir other-cache --config none.toml",
      "k.cu --arch sm_90 --target ptx -I inc -o out/a.ptx -X --use_fast_math",  // a value with '-': CLI11's
  };
  for (std::size_t i = 0; i < spellings.size(); ++i) {
    const std::string& words = spellings[i];
    const Outcome full = compile("full", words);
    const bool quick_takes_it = i + 1 < spellings.size();
    const Outcome quick = compile(quick_takes_it ? "quick" : "", words);
    expect_same(full, quick, words);
    if (quick_takes_it) {
      EXPECT_EQ(quick.err.find("KCACHE_CLI_PARSER=quick"), std::string::npos) << words << ": " << quick.err;
    }
  }
}

TEST_F(CliQuickParserTest, LeavesEverythingElseToCli11) {
  KCACHE_REQUIRE_TOOLKIT();
  write_sources();
  const std::vector<std::string> spellings = {
      "-I inc k.cu --arch sm_90 -o out/a.cubin",           // CLI11 gives -I the file too: "files is required"
      "k.cu --arch sm_90 --arch sm_80 -I inc -o out/a",    // twice: an error
      "k.cu --target=ptx --arch=sm_90 -I inc -o out/a.ptx",
      "k.cu -X -lineinfo --arch sm_90 -I inc -o out/a.cubin",
      "k.cu --arch sm_90 -j 010 -I inc -o out/a.cubin",    // CLI11 reads 010 as eight
      "k.cu --target bogus --arch sm_90",
      "k.cu --arch sm_90 -I inc -o -",
      "k.cu --arch sm_90 -I inc -o out/a.cubin --set fsync=none",
      "k.cu --arch sm_90 -I inc -o out/a.cubin --json --json",
      "--help",
      "--arch sm_90",
      "k.cu compile --arch sm_90 -o out/a.cubin",
  };
  for (const auto& words : spellings) {
    const Outcome full = compile("full", words);
    const Outcome fallback = compile("", words);
    expect_same(full, fallback, words);
    const Outcome quick_only = compile("quick", words);
    EXPECT_EQ(quick_only.rc, 2) << words;
    EXPECT_NE(quick_only.err.find("the quick parser of `compile` does not take these arguments"), std::string::npos)
        << words << ": " << quick_only.err;
  }
}

}  // namespace kcache::test
