// Runs the real kcache binary against a private cache directory and checks
// its output bytes, its JSON, the files it leaves, and its exit codes.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CliRun {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    m_cache = m_dir.path() / "cache";
    m_home = m_dir.path() / "home";
    fs::create_directories(m_home);
    // Only what kcache should see: no KCACHE_* from the person running the tests.
    m_env = {{"HOME", m_home.string()}, {"PATH", "/usr/bin:/bin"}, {"KCACHE_DIR", m_cache.string()}};
  }

  // Runs kcache with `args`; stdout and stderr go to files (no pipe deadlock).
  CliRun kcache(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra_env = {}) {
    std::map<std::string, std::string> env = m_env;
    for (const auto& [k, v] : extra_env) {
      env[k] = v;
    }
    const fs::path out = m_dir.path() / "stdout";
    const fs::path err = m_dir.path() / "stderr";
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) {
      env_strings.push_back(k + "=" + v);
    }
    std::vector<char*> envp;
    for (auto& s : env_strings) {
      envp.push_back(s.data());
    }
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings{KCACHE_CLI_PATH};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) {
      argv.push_back(s.data());
    }
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int in = ::open("/dev/null", O_RDONLY);
      if (o < 0 || e < 0 || in < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 || ::dup2(in, 0) < 0 ||
          ::chdir(m_dir.path().c_str()) != 0) {
        ::_exit(126);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    CliRun r;
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Writes `bytes` to a file and puts it; returns the printed key.
  std::string put(const std::string& name, const std::string& bytes, std::vector<std::string> extra = {}) {
    spit(m_dir.path() / "in" / name, bytes);
    std::vector<std::string> args{"put", (m_dir.path() / "in" / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = kcache(args);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.size(), 65U) << r.out;
    return r.out.substr(0, 64);
  }

  json stats() {
    const CliRun r = kcache({"stats", "--json"});
    EXPECT_EQ(r.rc, 0) << r.err;
    return json::parse(r.out);
  }

  static std::string random_bytes(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) {
      c = static_cast<char>(rng() & 0xff);
    }
    return s;
  }

  kcache::test::TempDir m_dir;
  fs::path m_cache;
  fs::path m_home;
  std::map<std::string, std::string> m_env;
};

}  // namespace

TEST_F(Cli, PutThenGetRoundTripsBytesExactly) {
  std::string bytes = random_bytes(300 * 1024, 1);
  bytes[10] = '\0';  // binary safe
  const std::string key = put("a.bin", bytes);
  ASSERT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);

  const CliRun to_stdout = kcache({"get", key});
  ASSERT_EQ(to_stdout.rc, 0) << to_stdout.err;
  EXPECT_TRUE(to_stdout.out == bytes) << "stdout differs from the input";

  const fs::path target = m_dir.path() / "out" / "a.copy";
  fs::create_directories(target.parent_path());
  const CliRun to_file = kcache({"get", key, "-o", target.string()});
  ASSERT_EQ(to_file.rc, 0) << to_file.err;
  EXPECT_TRUE(slurp(target) == bytes);
  EXPECT_TRUE(to_file.out.empty());
  // Only the output file is left: no temporary beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(target.parent_path()), fs::directory_iterator()), 1);
  // The payload on disk is exactly the raw bytes.
  EXPECT_TRUE(slurp(m_cache / "v1" / "entries" / key.substr(0, 2) / key) == bytes);
}

TEST_F(Cli, KeyDependsOnContentAndKindNeverOnTheFileName) {
  const std::string bytes = random_bytes(1000, 2);
  const std::string a = put("one/a.bin", bytes);
  const std::string b = put("two/other-name.bin", bytes);
  EXPECT_EQ(a, b);
  const std::string c = put("c.bin", random_bytes(1000, 3));
  EXPECT_NE(a, c);
  const std::string d = put("one/a.bin", bytes, {"--kind", "cubin"});
  EXPECT_NE(a, d);
  const CliRun again = kcache({"put", (m_dir.path() / "in" / "one/a.bin").string(), "--json"});
  ASSERT_EQ(again.rc, 0) << again.err;
  const json j = json::parse(again.out);
  EXPECT_EQ(j["key"], a);
  EXPECT_EQ(j["outcome"], "already_present");
  EXPECT_EQ(stats()["entries"], 3);
}

TEST_F(Cli, ShowPrintsThePassportAsJson) {
  const std::string bytes = random_bytes(4096, 4);
  const std::string key = put("k.bin", bytes, {"--kind", "engine", "--label", "model=resnet", "-l", "gpu=h100"});
  const CliRun r = kcache({"show", key});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json p = json::parse(r.out);
  EXPECT_EQ(p["format"], 1);
  EXPECT_EQ(p["key"], key);
  EXPECT_EQ(p["kind"], "engine");
  EXPECT_EQ(p["payload"]["size"], 4096);
  EXPECT_EQ(p["labels"]["model"], "resnet");
  EXPECT_EQ(p["labels"]["gpu"], "h100");
  EXPECT_EQ(p["producer"]["name"], "kcache");
  EXPECT_EQ(p["key_record"]["domain"], "blob");
}

TEST_F(Cli, LsListsEveryEntry) {
  const std::string a = put("a", random_bytes(100, 5));
  const std::string b = put("b", random_bytes(200, 6), {"--kind", "ptx"});
  const CliRun r = kcache({"ls", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json list = json::parse(r.out);
  ASSERT_EQ(list.size(), 2U);
  std::map<std::string, json> by_key;
  for (const auto& e : list) {
    by_key[e["key"]] = e;
  }
  EXPECT_EQ(by_key.at(a)["size"], 100);
  EXPECT_EQ(by_key.at(b)["kind"], "ptx");
  const CliRun table = kcache({"ls"});
  ASSERT_EQ(table.rc, 0);
  EXPECT_NE(table.out.find(a), std::string::npos);
  EXPECT_NE(table.out.find("KIND"), std::string::npos);
}

TEST_F(Cli, StatsCountHitsMissesAndPutsAcrossProcesses) {
  const std::string key = put("a", random_bytes(10000, 7));
  ASSERT_EQ(kcache({"get", key}).rc, 0);
  ASSERT_EQ(kcache({"get", key}).rc, 0);
  ASSERT_EQ(kcache({"get", std::string(64, 'e')}).rc, 3);
  const json s = stats();
  EXPECT_EQ(s["hits"], 2);
  EXPECT_EQ(s["misses"], 1);
  EXPECT_EQ(s["puts"], 1);
  EXPECT_EQ(s["entries"], 1);
  EXPECT_GE(s["size_bytes"].get<std::uint64_t>(), 10000U);
  EXPECT_EQ(s["max_size_bytes"], std::uint64_t{5} << 30);
  EXPECT_NEAR(s["hit_ratio"].get<double>(), 2.0 / 3.0, 1e-9);
  EXPECT_EQ(s["cache_dir"], m_cache.string());
  const CliRun human = kcache({"stats"});
  ASSERT_EQ(human.rc, 0);
  // `kcache get` is a lookup of the disk tier, not a compile request: the
  // tier's lines count it (requests lead the output, none here).
  EXPECT_NE(human.out.find("requests                 none counted yet"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("disk hit ratio           66.7%"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("disk hits' compile time"), std::string::npos) << human.out;
}

TEST_F(Cli, VerifyFindsAFlippedByteAndRepairRemovesIt) {
  const std::string good = put("good", random_bytes(5000, 8));
  const std::string bad = put("bad", random_bytes(5000, 9));
  ASSERT_EQ(kcache({"verify"}).rc, 0);
  const fs::path payload = m_cache / "v1" / "entries" / bad.substr(0, 2) / bad;
  std::string bytes = slurp(payload);
  ASSERT_EQ(bytes.size(), 5000U);
  bytes[2500] = static_cast<char>(bytes[2500] ^ 0x10);
  {
    // Rewrite in place (same inode), as a disk error would.
    std::fstream f(payload, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2500);
    f.put(bytes[2500]);
  }
  const CliRun found = kcache({"verify"});
  EXPECT_EQ(found.rc, 4) << found.out << found.err;
  EXPECT_NE(found.out.find(bad), std::string::npos) << found.out;
  EXPECT_NE(found.err.find("--repair"), std::string::npos);
  const CliRun json_run = kcache({"verify", "--json"});
  EXPECT_EQ(json_run.rc, 4);
  EXPECT_EQ(json::parse(json_run.out)["entries_bad"], 1);

  const CliRun repaired = kcache({"verify", "--repair"});
  EXPECT_EQ(repaired.rc, 0) << repaired.out << repaired.err;
  EXPECT_FALSE(fs::exists(payload));
  EXPECT_EQ(kcache({"verify"}).rc, 0);
  EXPECT_EQ(kcache({"get", bad}).rc, 3);
  const CliRun still = kcache({"get", good});
  EXPECT_EQ(still.rc, 0);
  EXPECT_TRUE(still.out == random_bytes(5000, 8));
}

TEST_F(Cli, GetNeverReturnsAFlippedPayload) {
  const std::string key = put("x", random_bytes(8000, 10));
  const fs::path payload = m_cache / "v1" / "entries" / key.substr(0, 2) / key;
  {
    std::fstream f(payload, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char c = static_cast<char>(f.get());
    f.seekp(100);
    f.put(static_cast<char>(c ^ 1));
  }
  const CliRun r = kcache({"get", key});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(stats()["corrupt"], 1);
}

TEST_F(Cli, PruneBringsTheCacheUnderTheGivenSize) {
  std::vector<std::string> keys;
  for (unsigned i = 0; i < 10; ++i) {
    keys.push_back(put("f" + std::to_string(i), random_bytes(100 * 1024, 20 + i)));
  }
  ASSERT_EQ(stats()["entries"], 10);
  const CliRun r = kcache({"prune", "--max-size", "300K", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json report = json::parse(r.out);
  EXPECT_LE(report["size_after"].get<std::uint64_t>(), 300U * 1024);
  EXPECT_GE(report["entries_removed"].get<std::uint64_t>(), 8U);
  const json s = stats();
  EXPECT_LE(s["size_bytes"].get<std::uint64_t>(), 300U * 1024);
  EXPECT_EQ(s["entries"], 10 - report["entries_removed"].get<int>());
  EXPECT_EQ(json::parse(kcache({"ls", "--json"}).out).size(), s["entries"].get<std::size_t>());
  // Whatever is left still reads back exactly.
  for (const auto& e : json::parse(kcache({"ls", "--json"}).out)) {
    EXPECT_EQ(kcache({"get", e["key"].get<std::string>()}).rc, 0);
  }
  EXPECT_EQ(kcache({"prune", "--max-size", "lots"}).rc, 2);
}

TEST_F(Cli, ClearRemovesEveryEntry) {
  put("a", random_bytes(100, 40));
  put("b", random_bytes(100, 41));
  const CliRun r = kcache({"clear"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("removed 2 entries"), std::string::npos) << r.out;
  EXPECT_EQ(json::parse(kcache({"ls", "--json"}).out).size(), 0U);
  const json s = stats();
  EXPECT_EQ(s["entries"], 0);
  EXPECT_EQ(s["size_bytes"], 0);
  EXPECT_EQ(s["puts"], 2);  // counters are kept
}

TEST_F(Cli, ConfigReportsEachValueAndItsSourceWithPrecedence) {
  const fs::path file = m_home / ".config" / "kcache" / "kcache.toml";
  spit(file, "max_size = \"1G\"\nfsync = \"none\"\nmemory_size = \"8M\"\n");
  const CliRun r = kcache({"--max-size", "3G", "config", "--json"}, {{"KCACHE_MAX_SIZE", "2G"}, {"KCACHE_FSYNC", "file"}});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["config_file"], file.string());
  std::map<std::string, json> rows;
  for (const auto& row : j["settings"]) {
    rows[row["key"]] = row;
  }
  EXPECT_EQ(rows.at("max_size")["value"], "3G");
  EXPECT_EQ(rows.at("max_size")["source"], "command line");
  EXPECT_EQ(rows.at("fsync")["value"], "file");
  EXPECT_EQ(rows.at("fsync")["source"], "environment");
  EXPECT_EQ(rows.at("memory_size")["value"], "8M");
  EXPECT_EQ(rows.at("memory_size")["source"], "config file");
  EXPECT_EQ(rows.at("sharing")["source"], "default");
  EXPECT_EQ(rows.at("cache_dir")["value"], m_cache.string());
  EXPECT_EQ(rows.at("cache_dir")["env"], "KCACHE_DIR");

  EXPECT_EQ(kcache({"config", "max_size"}).out, "1G\n");
  EXPECT_EQ(kcache({"config", "KCACHE_MAX_SIZE"}, {{"KCACHE_MAX_SIZE", "2G"}}).out, "2G\n");
  EXPECT_EQ(kcache({"--set", "fsync=file+directory", "config", "fsync"}).out, "file+directory\n");
  // --config names another file; XDG_CONFIG_HOME moves the default one.
  spit(m_dir.path() / "other.toml", "max_size = 12345\n");
  EXPECT_EQ(kcache({"--config", (m_dir.path() / "other.toml").string(), "config", "max_size"}).out, "12345\n");
  spit(m_dir.path() / "xdg" / "kcache" / "kcache.toml", "max_size = \"7M\"\n");
  EXPECT_EQ(kcache({"config", "max_size"}, {{"XDG_CONFIG_HOME", (m_dir.path() / "xdg").string()}}).out, "7M\n");
  const CliRun human = kcache({"config"});
  EXPECT_NE(human.out.find("config file " + file.string()), std::string::npos) << human.out;
}

TEST_F(Cli, BadSettingsAreClearErrorsWithExitCode2) {
  const fs::path file = m_home / ".config" / "kcache" / "kcache.toml";
  spit(file, "max_size = \"1G\"\nmax_sise = \"2G\"\n");
  const CliRun unknown = kcache({"stats"});
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_NE(unknown.err.find("kcache: error:"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find(file.string() + ":2"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("did you mean 'max_size'"), std::string::npos) << unknown.err;
  fs::remove(file);

  const CliRun env = kcache({"ls"}, {{"KCACHE_MAX_SIZE", "huge"}});
  EXPECT_EQ(env.rc, 2);
  EXPECT_NE(env.err.find("KCACHE_MAX_SIZE"), std::string::npos) << env.err;
  EXPECT_NE(env.err.find("\"huge\""), std::string::npos) << env.err;
  EXPECT_NE(env.err.find("512M"), std::string::npos) << env.err;

  const CliRun flag = kcache({"--set", "verify=sometimes", "ls"});
  EXPECT_EQ(flag.rc, 2);
  EXPECT_NE(flag.err.find("fast"), std::string::npos) << flag.err;

  const CliRun missing = kcache({"--config", "/nonexistent/kcache.toml", "config"});
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.err.find("/nonexistent/kcache.toml"), std::string::npos) << missing.err;
}

TEST_F(Cli, ExitCodesAndMessagesSayWhatToDo) {
  const CliRun bad_key = kcache({"get", "../../etc/passwd"});
  EXPECT_EQ(bad_key.rc, 2);
  EXPECT_NE(bad_key.err.find("64 lowercase hex"), std::string::npos) << bad_key.err;
  EXPECT_EQ(kcache({"show", std::string(64, 'A')}).rc, 2);
  const CliRun miss = kcache({"get", std::string(64, '0')});
  EXPECT_EQ(miss.rc, 3);
  EXPECT_TRUE(miss.out.empty());
  EXPECT_EQ(kcache({"show", std::string(64, '0')}).rc, 3);
  const CliRun no_file = kcache({"put", (m_dir.path() / "nope.bin").string()});
  EXPECT_EQ(no_file.rc, 1);
  EXPECT_NE(no_file.err.find("nope.bin"), std::string::npos) << no_file.err;
  EXPECT_NE(no_file.err.find("kcache: hint:"), std::string::npos) << no_file.err;
  spit(m_dir.path() / "x.bin", "x");
  EXPECT_EQ(kcache({"put", (m_dir.path() / "x.bin").string(), "--kind", "Bad Kind"}).rc, 2);
  EXPECT_EQ(kcache({"put", (m_dir.path() / "x.bin").string(), "--label", "novalue"}).rc, 2);
  const CliRun unknown = kcache({"fetch"});
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_NE(unknown.err.find("unknown command 'fetch'"), std::string::npos) << unknown.err;
  const CliRun missing_arg = kcache({"get"});
  EXPECT_EQ(missing_arg.rc, 2);
  EXPECT_NE(missing_arg.err.find("kcache get --help"), std::string::npos) << missing_arg.err;
  EXPECT_EQ(kcache({"ls", "--no-such-flag"}).rc, 2);
  EXPECT_EQ(kcache({}).rc, 2);
  // A cache directory that is a regular file cannot be opened: a failure (1)
  // or a bad setting (2), never a crash or a miss, and a message naming it.
  spit(m_dir.path() / "not-a-dir", "x");
  const CliRun bad_root = kcache({"--cache-dir", (m_dir.path() / "not-a-dir").string(), "ls"});
  EXPECT_TRUE(bad_root.rc == 1 || bad_root.rc == 2) << bad_root.rc << bad_root.err;
  EXPECT_NE(bad_root.err.find("not-a-dir"), std::string::npos) << bad_root.err;
  EXPECT_NE(bad_root.err.find("kcache: error:"), std::string::npos);
  // -o into a missing directory fails and leaves nothing.
  const std::string key = put("y", "yy");
  const CliRun no_dir = kcache({"get", key, "-o", (m_dir.path() / "missing" / "y").string()});
  EXPECT_EQ(no_dir.rc, 1);
  EXPECT_FALSE(fs::exists(m_dir.path() / "missing"));
}

TEST_F(Cli, EveryCommandHasHelp) {
  for (const std::string cmd : {"put", "get", "show", "ls", "stats", "verify", "prune", "clear", "config"}) {
    const CliRun r = kcache({cmd, "--help"});
    EXPECT_EQ(r.rc, 0) << cmd;
    EXPECT_NE(r.out.find("kcache " + cmd), std::string::npos) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << cmd;
  }
  const CliRun top = kcache({"--help"});
  EXPECT_EQ(top.rc, 0);
  for (const std::string cmd : {"put", "get", "show", "ls", "stats", "verify", "prune", "clear", "config"}) {
    EXPECT_NE(top.out.find(cmd), std::string::npos) << cmd;
  }
  EXPECT_NE(top.out.find("--cache-dir"), std::string::npos);
  const CliRun version = kcache({"--version"});
  EXPECT_EQ(version.rc, 0);
  EXPECT_NE(version.out.find("kcache "), std::string::npos);
}

TEST_F(Cli, DefaultCacheDirIsUnderHomeNeverTmp) {
  m_env.erase("KCACHE_DIR");
  const CliRun r = kcache({"config", "cache_dir"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, (m_home / ".cache" / "kcache").string() + "\n");
  const std::string key = put("z", "zzz");
  EXPECT_TRUE(fs::exists(m_home / ".cache" / "kcache" / "v1" / "entries" / key.substr(0, 2) / key));
}
