// A broken cache never breaks a build, and says so once (DESIGN rule 3,
// docs/configuration.md "When the cache is broken"): a bad setting outside the
// command line is one warning for `compile` and `link` (and exit 2 for the
// cache commands), a read-only cache is one warning per command however many
// worker processes compile, and a disabled cache has nothing written under its
// directory. Real kcache processes, real NVRTC.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "integration/cli_shell.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

using CliDegrade = CliShell;

const std::string k_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups";

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) {
      out.push_back(line);
    }
  }
  return out;
}

std::size_t warnings(const std::string& err) { return lines_starting(err, "kcache: warning:").size(); }

// A small kernel per name, so that every file has its own key.
void write_kernel(const fs::path& file, const std::string& name) {
  write_file(file, "extern \"C\" __global__ void " + name + "(int* p) { p[0] = " + std::to_string(name.size()) +
                       "; }\n");
}

bool is_elf(const fs::path& file) { return fs::exists(file) && read_file(file).substr(0, 4) == "\x7f" "ELF"; }

TEST_F(CliDegrade, BadSettingIsOneWarningAndTheCompileRunsWithoutTheCache) {
  KCACHE_REQUIRE_TOOLKIT();
  write_kernel(dir() / "a.cu", "ka");
  write_kernel(dir() / "b.cu", "kb");
  write_file(dir() / "not-toml.toml", "max_size = [\n");
  write_file(dir() / "unknown-key.toml", "max_sise = \"1G\"\n");
  write_file(dir() / "bad-value.toml", "fsync = \"sometimes\"\n");
  struct Case {
    std::string env;    // assignments before the command
    std::string names;  // what the one warning line must name
    std::string fix;    // how it says to fix it
  };
  const std::vector<Case> cases{
      {"KCACHE_MAX_SIZE=garbage", "KCACHE_MAX_SIZE: invalid value \"garbage\" for setting 'max_size'",
       "fix or unset KCACHE_MAX_SIZE"},
      {"KCACHE_VERIFY=never", "KCACHE_VERIFY: invalid value \"never\" for setting 'verify'",
       "fix or unset KCACHE_VERIFY"},
      {"KCACHE_CONFIG=not-toml.toml", "not-toml.toml:1:", "fix the file"},
      {"KCACHE_CONFIG=unknown-key.toml", "unknown-key.toml:1: unknown setting 'max_sise'", "did you mean 'max_size'?"},
      {"KCACHE_CONFIG=bad-value.toml", "bad-value.toml:1: invalid value \"sometimes\" for setting 'fsync'",
       "fix it in bad-value.toml"},
      {"KCACHE_CONFIG=missing.toml", "config file missing.toml (named by KCACHE_CONFIG) does not exist",
       "point KCACHE_CONFIG elsewhere"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env);
    const ShellRun one = sh(c.env + " \"$K\" compile a.cu --arch sm_90 -o a.cubin");
    EXPECT_EQ(one.rc, 0) << one.err;
    ASSERT_EQ(warnings(one.err), 1U) << one.err;
    EXPECT_EQ(lines_starting(one.err, "kcache: ").size(), 1U) << "one line in all: " << one.err;
    EXPECT_NE(one.err.find("kcache: warning: compiling without the cache: "), std::string::npos) << one.err;
    EXPECT_NE(one.err.find(c.names), std::string::npos) << one.err;
    EXPECT_NE(one.err.find(c.fix), std::string::npos) << one.err;
    EXPECT_TRUE(is_elf(dir() / "a.cubin"));
    // In worker processes too: still one line, both outputs.
    const ShellRun pool = sh(c.env + " \"$K\" compile a.cu b.cu --arch sm_90 -j 2");
    EXPECT_EQ(pool.rc, 0) << pool.err;
    EXPECT_EQ(warnings(pool.err), 1U) << pool.err;
    EXPECT_TRUE(is_elf(dir() / "b.cubin"));
    // Without the cache means without it: nothing was read or written there.
    EXPECT_FALSE(fs::exists(cache())) << "a cache with bad settings was used";
    fs::remove(dir() / "a.cubin");
    fs::remove(dir() / "b.cubin");
  }
  // Two bad settings: still one line, which says there is more.
  const ShellRun two = sh("KCACHE_MAX_SIZE=garbage KCACHE_JOBS=many \"$K\" compile a.cu --arch sm_90");
  EXPECT_EQ(two.rc, 0) << two.err;
  EXPECT_EQ(warnings(two.err), 1U) << two.err;
  EXPECT_NE(two.err.find("(and 1 more bad setting;"), std::string::npos) << two.err;
  // The exit code is the compile's.
  write_file(dir() / "bad.cu", "__global__ void k( { }\n");
  const ShellRun bad = sh("KCACHE_MAX_SIZE=garbage \"$K\" compile bad.cu --arch sm_90");
  EXPECT_EQ(bad.rc, 5) << bad.err;
  EXPECT_EQ(warnings(bad.err), 1U) << bad.err;
  // `link` degrades the same way.
  ASSERT_EQ(sh("\"$K\" compile a.cu --target ptx --arch sm_90 -o a.ptx --no-cache").rc, 0);
  fs::remove_all(cache());
  const ShellRun link = sh("KCACHE_MAX_SIZE=garbage \"$K\" link a.ptx --arch sm_90 -o linked.cubin");
  EXPECT_EQ(link.rc, 0) << link.err;
  EXPECT_EQ(warnings(link.err), 1U) << link.err;
  EXPECT_NE(link.err.find("kcache: warning: linking without the cache: "), std::string::npos) << link.err;
  EXPECT_TRUE(is_elf(dir() / "linked.cubin"));
  EXPECT_FALSE(fs::exists(cache()));
}

TEST_F(CliDegrade, BadSettingStaysExit2ForCacheCommandsAndOnTheCommandLine) {
  write_file(dir() / "f", "bytes\n");
  write_kernel(dir() / "a.cu", "ka");
  const std::string zeros(64, '0');
  // Cache commands: the setting is about what they act on, so it is an error.
  const std::vector<std::string> commands{"put f", "get " + zeros, "show " + zeros, "ls", "stats", "verify", "prune",
                                          "clear", "config", "why-miss " + zeros + " " + zeros};
  for (const std::string& command : commands) {
    const ShellRun r = sh("KCACHE_MAX_SIZE=garbage \"$K\" " + command);
    EXPECT_EQ(r.rc, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("kcache: error: invalid_argument: environment variable KCACHE_MAX_SIZE: invalid value "
                         "\"garbage\""),
              std::string::npos)
        << command << ": " << r.err;
  }
  // A compile's own command line is a usage error, whatever the command.
  for (const std::string args :
       {"--max-size garbage compile a.cu --arch sm_90", "--set fsync=x compile a.cu --arch sm_90",
        "--config nope.toml compile a.cu --arch sm_90", "--set nope=1 link a.ptx --arch sm_90",
        "compile a.cu --arch sm_90 --target bogus"}) {
    const ShellRun r = sh("\"$K\" " + args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("kcache: error: "), std::string::npos) << args << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir() / "a.cubin")) << args;
  }
}

TEST_F(CliDegrade, ReadOnlyCacheIsOneWarningPerCommandAndCompilesSucceed) {
  KCACHE_REQUIRE_TOOLKIT();
  // Root ignores file modes: the cache belongs to nobody, who then runs kcache.
  fs::permissions(root(), fs::perms::all);
  fs::permissions(dir(), fs::perms::all);
  for (const std::string name : {"k1", "k2", "k3", "k4", "k5", "k6"}) {
    write_kernel(dir() / (name + ".cu"), name);
  }
  ASSERT_EQ(sh("mkdir -p \"$KCACHE_DIR\" && chown 65534 \"$KCACHE_DIR\"").rc, 0);
  const ShellRun warm = sh(k_nobody + " \"$K\" compile k1.cu --arch sm_90");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  ASSERT_EQ(warnings(warm.err), 0U) << warm.err;
  ASSERT_EQ(sh("chmod -R a-w \"$KCACHE_DIR\"").rc, 0);

  // Three misses in two worker processes: one line for the one failure.
  const ShellRun pool = sh(k_nobody + " \"$K\" compile k2.cu k3.cu k4.cu --arch sm_90 -j 2");
  EXPECT_EQ(pool.rc, 0) << pool.err;
  EXPECT_EQ(warnings(pool.err), 1U) << pool.err;
  EXPECT_NE(pool.err.find("kcache: warning: the cache at " + cache().string() + " cannot be written ("),
            std::string::npos)
      << pool.err;
  for (const std::string name : {"k2", "k3", "k4"}) {
    EXPECT_TRUE(is_elf(dir() / (name + ".cubin"))) << name;
  }
  // In this process, with background and with synchronous puts.
  for (const std::string put : {"background", "sync"}) {
    const ShellRun one = sh(k_nobody + " \"$K\" --set put=" + put + " compile k5.cu --arch sm_90");
    EXPECT_EQ(one.rc, 0) << put << ": " << one.err;
    EXPECT_EQ(warnings(one.err), 1U) << put << ": " << one.err;
    EXPECT_TRUE(is_elf(dir() / "k5.cubin"));
    const ShellRun pool_sync = sh(k_nobody + " \"$K\" --set put=" + put + " compile k5.cu k6.cu --arch sm_90 -j 2");
    EXPECT_EQ(pool_sync.rc, 0) << put << ": " << pool_sync.err;
    EXPECT_EQ(warnings(pool_sync.err), 1U) << put << ": " << pool_sync.err;
  }
  // Reads still work: the entry written before is a hit, without a word.
  const ShellRun hit = sh(k_nobody + " \"$K\" compile k1.cu --arch sm_90 --json");
  EXPECT_EQ(hit.rc, 0) << hit.err;
  EXPECT_EQ(warnings(hit.err), 0U) << hit.err;
  EXPECT_TRUE(nlohmann::json::parse(hit.out)["hit"].get<bool>()) << hit.out;
  sh("chmod -R u+w \"$KCACHE_DIR\"");
}

// A cache on a read-only filesystem (a real EROFS: a tmpfs remounted
// read-only): the single-flight lock fails before the put does, in whatever
// order the parallel compiles meet them, and the command still says it once.
TEST_F(CliDegrade, ReadOnlyFilesystemIsOneWarningPerCommandWhateverTheParallelism) {
  KCACHE_REQUIRE_TOOLKIT();
  if (::geteuid() != 0) {
    GTEST_SKIP() << "mounting a read-only tmpfs needs root";
  }
  for (const std::string name : {"r1", "r2", "r3", "r4", "r5", "r6", "r7"}) {
    write_kernel(dir() / (name + ".cu"), name);
  }
  const fs::path mnt = root() / "rofs";
  fs::create_directories(mnt);
  ASSERT_EQ(sh("mount -t tmpfs -o size=64m tmpfs '" + mnt.string() + "'").rc, 0);
  const std::string env = "KCACHE_DIR='" + (mnt / "cache").string() + "' ";
  const ShellRun warm = sh(env + "\"$K\" compile r1.cu --arch sm_90");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  ASSERT_EQ(sh("mount -o remount,ro '" + mnt.string() + "'").rc, 0);
  for (const std::string jobs : {"2", "4"}) {
    const std::string files = jobs == "2" ? "r2.cu r3.cu r4.cu" : "r5.cu r6.cu r7.cu";
    const ShellRun pool = sh(env + "\"$K\" compile " + files + " --arch sm_90 -j " + jobs);
    EXPECT_EQ(pool.rc, 0) << pool.err;
    EXPECT_EQ(warnings(pool.err), 1U) << "-j " << jobs << ": " << pool.err;
    EXPECT_NE(pool.err.find("cannot be written ("), std::string::npos) << pool.err;
    EXPECT_NE(pool.err.find("Read-only file system"), std::string::npos) << pool.err;
  }
  const ShellRun one = sh(env + "\"$K\" compile r2.cu --arch sm_90");
  EXPECT_EQ(one.rc, 0) << one.err;
  EXPECT_EQ(warnings(one.err), 1U) << one.err;
  const ShellRun hit = sh(env + "\"$K\" compile r1.cu --arch sm_90 --json");
  EXPECT_EQ(hit.rc, 0) << hit.err;
  EXPECT_EQ(warnings(hit.err), 0U) << hit.err;
  sh("umount '" + mnt.string() + "'");
}

TEST_F(CliDegrade, DisabledCacheHasNothingWrittenUnderItsDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  write_kernel(dir() / "a.cu", "ka");
  write_kernel(dir() / "b.cu", "kb");
  write_file(dir() / "off.toml", "disable = true\n");
  const fs::path default_cache = root() / "home" / ".cache";
  for (const std::string how :
       {"KCACHE_DISABLE=1 \"$K\"", "\"$K\" --set disable=true", "KCACHE_CONFIG=off.toml \"$K\""}) {
    SCOPED_TRACE(how);
    const ShellRun one = sh(how + " compile a.cu --arch sm_90 -o one.cubin");
    EXPECT_EQ(one.rc, 0) << one.err;
    const ShellRun pool = sh(how + " compile a.cu b.cu --arch sm_90 -j 2");
    EXPECT_EQ(pool.rc, 0) << pool.err;
    EXPECT_EQ(warnings(one.err) + warnings(pool.err), 0U) << one.err << pool.err;
    EXPECT_FALSE(fs::exists(cache())) << "a disabled cache had its directory created";
    EXPECT_FALSE(fs::exists(default_cache)) << "a disabled cache wrote under the default cache directory";
    fs::remove_all(cache());
  }
  // The bytes are those of a compile through the cache.
  const std::string disabled = read_file(dir() / "a.cubin");
  ASSERT_TRUE(is_elf(dir() / "a.cubin"));
  EXPECT_EQ(read_file(dir() / "one.cubin"), disabled);
  ASSERT_EQ(sh("\"$K\" compile a.cu --arch sm_90 -o cached.cubin").rc, 0);
  EXPECT_EQ(read_file(dir() / "cached.cubin"), disabled);
  EXPECT_TRUE(fs::exists(cache() / "v1" / "entries"));
}

// With the cache off the compile is the program's own: no key is derived (no
// disk header scanned), in this process and in worker processes alike, and the
// bytes are those of a compile through the cache.
TEST_F(CliDegrade, WithTheCacheOffNoKeyIsDerivedInTheProcessOrItsWorkers) {
  KCACHE_REQUIRE_TOOLKIT();
  fs::create_directories(dir() / "inc");
  write_file(dir() / "inc" / "h.h", "#define V 7\n");
  for (const std::string name : {"a", "b"}) {
    write_file(dir() / (name + ".cu"), "#include <h.h>\nextern \"C\" __global__ void k" + name +
                                           "(int* p) { p[0] = V; }\n");
  }
  auto not_keyed = [](const nlohmann::json& passport) {
    for (const auto& f : passport["key_record"]["fields"]) {
      if (f["name"] == "not_cacheable") {
        return f["value"] == "compiled without a cache";
      }
    }
    return false;
  };
  for (const std::string how : {"KCACHE_DISABLE=1 \"$K\" compile", "\"$K\" compile --no-cache"}) {
    SCOPED_TRACE(how);
    const ShellRun one = sh(how + " a.cu --arch sm_90 -I inc --json -o off.cubin");
    ASSERT_EQ(one.rc, 0) << one.err;
    const auto j = nlohmann::json::parse(one.out);
    EXPECT_TRUE(j["disk_headers"].empty()) << one.out;
    EXPECT_FALSE(j["cacheable"].get<bool>());
    EXPECT_EQ(j["not_cacheable_reason"], "compiled without a cache");
    EXPECT_TRUE(not_keyed(j["passport"])) << one.out;
    const ShellRun pool = sh(how + " a.cu b.cu --arch sm_90 -I inc -j 2 --json");
    ASSERT_EQ(pool.rc, 0) << pool.err;
    const auto list = nlohmann::json::parse(pool.out);
    ASSERT_EQ(list.size(), 2u) << pool.out;
    for (const auto& r : list) {
      EXPECT_TRUE(not_keyed(r["passport"])) << pool.out;
    }
  }
  const ShellRun cached = sh("\"$K\" compile a.cu --arch sm_90 -I inc --json -o on.cubin");
  ASSERT_EQ(cached.rc, 0) << cached.err;
  EXPECT_EQ(nlohmann::json::parse(cached.out)["disk_headers"].size(), 1u) << cached.out;
  EXPECT_EQ(read_file(dir() / "on.cubin"), read_file(dir() / "off.cubin"));
  EXPECT_EQ(read_file(dir() / "a.cubin"), read_file(dir() / "off.cubin"));
}

}  // namespace
}  // namespace kcache::test
