// The team tier end to end: real `kcache` processes with their own cache
// directories ("hosts") sharing one real redis-server, real NVRTC.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/remote/remote_codec.hpp"
#include "support/disk_usage.hpp"
#include "support/files.hpp"
#include "support/nginx_server.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Run {
  int status = -1;
  std::string out;
};

// Runs the kcache command with KCACHE_DIR=`cache` and `env` ("A=b C=d"), in
// `cwd` when one is given.
Run run_cli(const fs::path& cache, const std::string& env, const std::string& args, const fs::path& cwd = {}) {
  const std::string cd = cwd.empty() ? std::string() : "cd '" + cwd.string() + "' && ";
  const std::string cmd =
      cd + "KCACHE_DIR='" + cache.string() + "' " + env + " '" + KCACHE_CLI_PATH + "' " + args + " 2>&1";
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

// The arguments of a `compile --json` of the trivial kernel to an sm_90 cubin at `out`.
std::string compile_trivial(const fs::path& out) {
  return "compile " + std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu" +
         " --target cubin --arch sm_90 --json -o " + out.string();
}

// The JSON object a `compile --json` printed (warnings may precede it).
nlohmann::json json_of(const std::string& out) { return nlohmann::json::parse(out.substr(out.find('{'))); }

class CliRemote : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_server = test::RedisServer::start(m_tmp.path() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
    m_key = m_tmp.path() / "team.key";
    auto made = run_cli(m_tmp.path() / "unused", "", "remote keygen " + m_key.string());
    ASSERT_EQ(made.status, 0) << made.out;
  }

  std::string env(const std::string& extra = {}) const {
    return "KCACHE_REMOTE='" + m_server->url() + "' KCACHE_REMOTE_KEY_FILE='" + m_key.string() + "' " + extra;
  }

  test::TempDir m_tmp;
  std::unique_ptr<test::RedisServer> m_server;
  fs::path m_key;
};

TEST_F(CliRemote, KeygenWritesA0600KeyAndRefusesToReplaceIt) {
  struct stat st {};
  ASSERT_EQ(::stat(m_key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  const std::string before = test::read_file(m_key);
  auto again = run_cli(m_tmp.path() / "unused", "", "remote keygen " + m_key.string());
  EXPECT_EQ(again.status, 1) << again.out;
  EXPECT_NE(again.out.find("already exists"), std::string::npos) << again.out;
  EXPECT_EQ(test::read_file(m_key), before);
}

TEST_F(CliRemote, SecondHostHitsFromTheRemoteWithoutCompilingByteEqualToAFreshCompile) {
  KCACHE_REQUIRE_TOOLKIT();
  // Host A compiles and publishes (its exit flushes the upload queue).
  auto a = run_cli(m_tmp.path() / "hostA", env(), compile_trivial(m_tmp.path() / "a.cubin"));
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_FALSE(json_of(a.out)["hit"].get<bool>());
  const std::string key = json_of(a.out)["key"].get<std::string>();
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + key}), "1");
  // Host B (empty local cache) hits from the remote, without loading NVRTC.
  auto b = run_cli(m_tmp.path() / "hostB", env(), compile_trivial(m_tmp.path() / "b.cubin"));
  ASSERT_EQ(b.status, 0) << b.out;
  const auto jb = json_of(b.out);
  EXPECT_TRUE(jb["hit"].get<bool>()) << b.out;
  // A new host loads NVRTC once to learn its version (part of the key), but compiles nothing.
  EXPECT_EQ(jb["compile_us"].get<long long>(), 0) << "a remote hit must not compile: " << b.out;
  EXPECT_EQ(jb["key"].get<std::string>(), key);
  auto stats = run_cli(m_tmp.path() / "hostB", "", "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto js = json_of(stats.out);
  EXPECT_EQ(js["remote"]["hits"].get<int>(), 1) << stats.out;
  EXPECT_GT(js["remote"]["bytes_in"].get<long long>(), 0) << stats.out;
  EXPECT_GT(js["remote"]["get_p99_us"].get<long long>(), 0) << stats.out;
  EXPECT_GT(js["remote"]["compile_us_saved"].get<long long>(), 0) << stats.out;
  // The remote hit filled host B's file store: a third run hits with the server gone.
  m_server->kill();
  auto b2 = run_cli(m_tmp.path() / "hostB", env("KCACHE_REMOTE_BREAKER_FAILURES=1"),
                    compile_trivial(m_tmp.path() / "b2.cubin"));
  ASSERT_EQ(b2.status, 0) << b2.out;
  EXPECT_TRUE(json_of(b2.out)["hit"].get<bool>());
  // A fresh compile with no cache at all gives the same bytes.
  auto fresh = run_cli(m_tmp.path() / "fresh", "KCACHE_DISABLE=1", compile_trivial(m_tmp.path() / "c.cubin"));
  ASSERT_EQ(fresh.status, 0) << fresh.out;
  EXPECT_EQ(test::read_file(m_tmp.path() / "b.cubin"), test::read_file(m_tmp.path() / "c.cubin"));
  EXPECT_EQ(test::read_file(m_tmp.path() / "b2.cubin"), test::read_file(m_tmp.path() / "c.cubin"));
  EXPECT_EQ(test::read_file(m_tmp.path() / "a.cubin"), test::read_file(m_tmp.path() / "c.cubin"));
}

// Issue 18 item 9: a new cache directory (a CI job's first compile) that hits
// the remote loads no library (the per-user toolkit memo knows NVRTC) and
// holds no toolkit file; a one-entry cache stays within 64 KiB.
TEST_F(CliRemote, ARemoteHitIntoANewCacheDirectoryLoadsNoLibrary) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string user = "XDG_CACHE_HOME='" + (m_tmp.path() / "xdg").string() + "'";
  // A local compile: a one-entry cache of at most 64 KiB on disk, no empty lock directory.
  auto local = run_cli(m_tmp.path() / "local", user, compile_trivial(m_tmp.path() / "l.cubin"));
  ASSERT_EQ(local.status, 0) << local.out;
  EXPECT_TRUE(fs::exists(m_tmp.path() / "xdg" / "kcache-toolkit" / "memo"));
  EXPECT_LE(test::tree_disk_bytes(m_tmp.path() / "local"), 64U * 1024) << "du of a one-entry cache";
  auto a = run_cli(m_tmp.path() / "hostA", env(user), compile_trivial(m_tmp.path() / "a.cubin"));
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = run_cli(m_tmp.path() / "hostB", env(user), compile_trivial(m_tmp.path() / "b.cubin"));
  ASSERT_EQ(b.status, 0) << b.out;
  const auto jb = json_of(b.out);
  EXPECT_TRUE(jb["hit"].get<bool>()) << b.out;
  EXPECT_EQ(jb["hit_tier"].get<std::string>().rfind("redis://", 0), 0U) << b.out;
  EXPECT_EQ(jb["toolkit_loads"].get<int>(), 0) << "the version came from the toolkit memo: " << b.out;
  EXPECT_FALSE(fs::exists(m_tmp.path() / "hostB" / "v1" / "toolkit"));
  EXPECT_EQ(test::read_file(m_tmp.path() / "b.cubin"), test::read_file(m_tmp.path() / "a.cubin"));
  // The remote hit into a new directory: still a one-entry cache of at most 64 KiB (the
  // remote's breaker and counters are one file, v1/stats/remote-<id>).
  EXPECT_LE(test::tree_disk_bytes(m_tmp.path() / "hostB"), 64U * 1024) << "du of a one-entry cache after a remote hit";
  // A user without the memo (a machine's first run) loads NVRTC once to learn its version.
  auto c = run_cli(m_tmp.path() / "hostC", env("XDG_CACHE_HOME='" + (m_tmp.path() / "xdg2").string() + "'"),
                   compile_trivial(m_tmp.path() / "c.cubin"));
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_TRUE(json_of(c.out)["hit"].get<bool>()) << c.out;
  EXPECT_EQ(json_of(c.out)["toolkit_loads"].get<int>(), 1) << c.out;
}

// Each remote keeps its breaker and counters in one file, v1/stats/remote-<id>;
// `kcache stats`' totals ("remote") are the sum of those files.
TEST_F(CliRemote, StatsTotalsAreTheSumOfEachRemotesOwnFile) {
  KCACHE_REQUIRE_TOOLKIT();
  auto a = run_cli(m_tmp.path() / "hostA", env(), compile_trivial(m_tmp.path() / "a.cubin"));
  ASSERT_EQ(a.status, 0) << a.out;
  // Host B asks a remote that is down first, then the team's.
  const std::string down = "redis://127.0.0.1:" + std::to_string(test::free_port());
  auto b = run_cli(m_tmp.path() / "hostB",
                   "KCACHE_REMOTE='" + down + " " + m_server->url() + "' KCACHE_REMOTE_KEY_FILE='" + m_key.string() + "'",
                   compile_trivial(m_tmp.path() / "b.cubin"));
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(json_of(b.out)["hit"].get<bool>()) << b.out;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(m_tmp.path() / "hostB" / "v1" / "stats")) {
    if (e.path().filename().string().rfind("remote", 0) == 0) {
      files.push_back(e.path().filename().string());
    }
  }
  EXPECT_EQ(files.size(), 2U) << "one file per remote, no totals file";
  auto stats = run_cli(m_tmp.path() / "hostB", "", "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto js = json_of(stats.out);
  ASSERT_EQ(js["remotes"].size(), 2U) << stats.out;
  for (const char* counter : {"hits", "misses", "errors", "skipped", "puts", "bytes_in", "bytes_out",
                              "compile_us_saved", "lease_taken"}) {
    EXPECT_EQ(js["remote"][counter].get<long long>(),
              js["remotes"][0][counter].get<long long>() + js["remotes"][1][counter].get<long long>())
        << counter << "\n" << stats.out;
  }
  EXPECT_EQ(js["remote"]["hits"].get<int>(), 1) << stats.out;
  EXPECT_GE(js["remote"]["errors"].get<int>(), 1) << stats.out;
  // The team's remote (sorted by server name: 127.0.0.1 ports differ, so find it) has its own latency.
  for (const auto& r : js["remotes"]) {
    if (r["hits"].get<int>() == 1) {
      EXPECT_GT(r["get_p50_us"].get<long long>(), 0) << stats.out;
    }
  }
}

TEST_F(CliRemote, PoisonedRemoteEntryIsNeverUsedNorStoredLocallyAndTheCompileStillHappens) {
  KCACHE_REQUIRE_TOOLKIT();
  // Learn the key without touching the remote.
  auto probe = run_cli(m_tmp.path() / "probe", "", compile_trivial(m_tmp.path() / "p.cubin"));
  ASSERT_EQ(probe.status, 0) << probe.out;
  const std::string key = json_of(probe.out)["key"].get<std::string>();
  // An attacker who can write to Redis but lacks the team key plants an
  // unsigned object (a valid artifact whose payload is not a cubin of this source).
  m_server->cli({"SET", "kcache:v1:" + key, "garbage-from-an-attacker"});
  auto victim = run_cli(m_tmp.path() / "victim", env(), compile_trivial(m_tmp.path() / "v.cubin"));
  ASSERT_EQ(victim.status, 0) << victim.out;
  EXPECT_FALSE(json_of(victim.out)["hit"].get<bool>()) << victim.out;
  EXPECT_NE(victim.out.find("bad object"), std::string::npos) << victim.out;
  EXPECT_EQ(test::read_file(m_tmp.path() / "v.cubin"), test::read_file(m_tmp.path() / "p.cubin"));
  // The planted object is still there (SET NX never overwrites), and the
  // victim's local store holds only its own compile.
  EXPECT_EQ(m_server->cli({"GET", "kcache:v1:" + key}), "garbage-from-an-attacker");
  // Counted, per reason, in the shared stats of the victim's cache directory.
  auto stats = run_cli(m_tmp.path() / "victim", "", "stats --json");
  ASSERT_EQ(stats.status, 0) << stats.out;
  const auto js = json_of(stats.out);
  EXPECT_EQ(js["remote"]["rejected"].get<int>(), 1) << stats.out;
  EXPECT_EQ(js["remote"]["rejected_by"]["malformed"].get<int>(), 1) << stats.out;
  EXPECT_EQ(js["remote"]["hits"].get<int>(), 0) << stats.out;
}

TEST_F(CliRemote, ServerDownAtStartIsOneWarningAndTheCompileSucceeds) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  m_server->kill();
  auto r = run_cli(m_tmp.path() / "host", env(),
                   "compile " + src + " --target ptx --arch sm_90 --json -o " + (m_tmp.path() / "k.ptx").string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::size_t warnings = 0;
  for (std::size_t at = r.out.find("warning:"); at != std::string::npos; at = r.out.find("warning:", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1U) << r.out;
  EXPECT_TRUE(fs::exists(m_tmp.path() / "k.ptx"));
}

TEST_F(CliRemote, ConfigMasksPasswordsAndTakesRepeatedRemoteOptions) {
  auto r = run_cli(m_tmp.path() / "c", "",
                   "--remote redis://u:hunter2@127.0.0.1:1 --remote redis+unix:///tmp/x.sock?read_only=true config");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("hunter2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("redis://u:***@127.0.0.1:1 redis+unix:///tmp/x.sock?read_only=true"), std::string::npos)
      << r.out;
  auto bad = run_cli(m_tmp.path() / "c", "KCACHE_REMOTE='redis://u:hunter2@h:notaport'", "config");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_EQ(bad.out.find("hunter2"), std::string::npos) << bad.out;
  // The TOML table form.
  const auto cfg = m_tmp.path() / "kcache.toml";
  std::ofstream(cfg) << "remote = [\"redis://a:6379\", {url = \"redis://b:6380/1\", read_only = true, timeout_ms = 50}]\n";
  auto t = run_cli(m_tmp.path() / "c", "", "--config " + cfg.string() + " config");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("redis://a:6379 redis://b:6380/1?read_only=true&timeout_ms=50"), std::string::npos) << t.out;
}

TEST_F(CliRemote, PushSeedsTheTeamCacheAndPullPrefetchesIntoAnotherHost) {
  const auto blob = m_tmp.path() / "payload.bin";
  std::ofstream(blob) << std::string(50000, 'q') << "tail";
  auto put = run_cli(m_tmp.path() / "ci", "", "--set put=sync put " + blob.string() + " --json");
  ASSERT_EQ(put.status, 0) << put.out;
  const std::string key = json_of(put.out)["key"].get<std::string>();
  // `put` of a blob does not go through the remote tiers: push uploads it.
  auto push = run_cli(m_tmp.path() / "ci", env(), "push --all --json");
  ASSERT_EQ(push.status, 0) << push.out;
  EXPECT_EQ(json_of(push.out)["uploaded"].get<int>(), 1) << push.out;
  auto again = run_cli(m_tmp.path() / "ci", env(), "push " + key + " --json");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(json_of(again.out)["already_present"].get<int>(), 1) << again.out;
  // Another host pulls it; afterwards its local `get` hits with the same bytes.
  auto pull = run_cli(m_tmp.path() / "dev", env(), "pull " + key + " --json");
  ASSERT_EQ(pull.status, 0) << pull.out;
  EXPECT_EQ(json_of(pull.out)["pulled"].get<int>(), 1) << pull.out;
  auto get = run_cli(m_tmp.path() / "dev", "", "get " + key + " -o " + (m_tmp.path() / "got.bin").string());
  ASSERT_EQ(get.status, 0) << get.out;
  EXPECT_EQ(test::read_file(m_tmp.path() / "got.bin"), test::read_file(blob));
  // An unknown key is a miss (exit 3); a read-only remote cannot be pushed to (exit 2).
  auto miss = run_cli(m_tmp.path() / "dev", env(), "pull " + std::string(64, 'a'));
  EXPECT_EQ(miss.status, 3) << miss.out;
  auto ro = run_cli(m_tmp.path() / "ci", "KCACHE_REMOTE='" + m_server->url() + "?read_only=true'", "push --all");
  EXPECT_EQ(ro.status, 2) << ro.out;
}

TEST_F(CliRemote, TwoHostsShareAnHttpRemoteAndAHungServerNeverBlocksTheCompile) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string why;
  auto nginx = test::NginxServer::start(m_tmp.path() / "nginx", &why);
  if (nginx == nullptr) {
    const char* req = std::getenv("KCACHE_REQUIRE_TOOLKIT");
    if (!test::nginx_installed() && (req == nullptr || std::string(req) != "1")) {
      GTEST_SKIP() << why;
    }
    FAIL() << why;
  }
  const std::string http_env =
      "KCACHE_REMOTE='" + nginx->url() + "?timeout_ms=300' KCACHE_REMOTE_KEY_FILE='" + m_key.string() + "'";
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const std::string compile = "compile " + src + " --target ptx --arch sm_90 --json -o ";
  auto a = run_cli(m_tmp.path() / "hostA", http_env, compile + (m_tmp.path() / "a.ptx").string());
  ASSERT_EQ(a.status, 0) << a.out;
  const std::string key = json_of(a.out)["key"].get<std::string>();
  EXPECT_TRUE(fs::exists(nginx->data_dir() / "cache" / ("kcache:v1:" + key)));
  auto b = run_cli(m_tmp.path() / "hostB", http_env, compile + (m_tmp.path() / "b.ptx").string());
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(json_of(b.out)["hit"].get<bool>()) << b.out;
  EXPECT_EQ(json_of(b.out)["compile_us"].get<long long>(), 0) << b.out;
  EXPECT_EQ(test::read_file(m_tmp.path() / "a.ptx"), test::read_file(m_tmp.path() / "b.ptx"));
  // SIGSTOPped server: host C still compiles, within the timeouts, with one warning.
  nginx->pause();
  auto c = run_cli(m_tmp.path() / "hostC", http_env, compile + (m_tmp.path() / "c.ptx").string());
  nginx->resume();
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_FALSE(json_of(c.out)["hit"].get<bool>());
  EXPECT_NE(c.out.find("warning"), std::string::npos) << c.out;
  EXPECT_EQ(test::read_file(m_tmp.path() / "c.ptx"), test::read_file(m_tmp.path() / "a.ptx"));
}

// A process exiting with uploads queued to a server that answers reads but
// holds every write (CLIENT PAUSE ... WRITE) waits at most
// remote_flush_timeout_ms (plus the one upload in flight, bounded by the
// remote's timeout_ms), drops the rest with one warning, and its compiles
// are all done and correct.
TEST_F(CliRemote, ExitWithUploadsQueuedToAHungServerIsBoundedByTheFlushTimeout) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path dir = m_tmp.path() / "src";
  fs::create_directories(dir);
  std::string files;
  for (int i = 0; i < 4; ++i) {
    const fs::path f = dir / ("k" + std::to_string(i) + ".cu");
    std::ofstream(f) << "extern \"C\" __global__ void k" << i << "(float* p) { p[threadIdx.x] += " << i << "; }\n";
    files += " " + f.string();
  }
  const std::string hung_env = "KCACHE_REMOTE='" + m_server->url() + "?timeout_ms=500' KCACHE_REMOTE_KEY_FILE='" +
                               m_key.string() +
                               "' KCACHE_REMOTE_BREAKER_FAILURES=0 KCACHE_REMOTE_FLUSH_TIMEOUT_MS=100 KCACHE_REMOTE_LEASE_TTL_MS=0";
  const fs::path out = m_tmp.path() / "out";
  fs::create_directories(out);
  // (Leases off: a held SET NX would pace the compiles to one upload each.)
  ASSERT_EQ(m_server->cli({"CLIENT", "PAUSE", "20000", "WRITE"}), "OK");
  auto r = run_cli(m_tmp.path() / "host", hung_env, "compile" + files + " --target ptx --arch sm_90 -j 1", out);
  ASSERT_EQ(m_server->cli({"CLIENT", "UNPAUSE"}), "OK");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("still queued after 100 ms at exit, dropped"), std::string::npos) << r.out;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(fs::exists(out / ("k" + std::to_string(i) + ".ptx"))) << r.out;
  }
}

TEST_F(CliRemote, PingReportsTheServerAndFailsForADeadOne) {
  auto ok = run_cli(m_tmp.path() / "c", env(), "remote ping");
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("redis 7"), std::string::npos) << ok.out;
  m_server->kill();
  auto dead = run_cli(m_tmp.path() / "c", env(), "remote ping");
  EXPECT_EQ(dead.status, 1) << dead.out;
}

// A host fed by the remote (its own cache directory, empty) sees its remote
// hits as served requests, from the remote, though its disk tier missed each.
TEST_F(CliRemote, ARemoteFedHostCountsItsRemoteHitsAsServed) {
  KCACHE_REQUIRE_TOOLKIT();
  auto a = run_cli(m_tmp.path() / "hostA", env(), compile_trivial(m_tmp.path() / "a.cubin"));
  ASSERT_EQ(a.status, 0) << a.out;
  auto b = run_cli(m_tmp.path() / "hostB", env(), compile_trivial(m_tmp.path() / "b.cubin"));
  ASSERT_EQ(b.status, 0) << b.out;
  ASSERT_TRUE(json_of(b.out)["hit"].get<bool>()) << b.out;
  auto b2 = run_cli(m_tmp.path() / "hostB", env(), compile_trivial(m_tmp.path() / "b2.cubin"));
  ASSERT_EQ(b2.status, 0) << b2.out;
  const auto js = json_of(run_cli(m_tmp.path() / "hostB", "", "stats --json").out);
  const auto requests = js["requests"];
  EXPECT_EQ(requests["total"], 2) << js.dump();
  EXPECT_EQ(requests["served"]["remote"], 1) << js.dump();
  EXPECT_EQ(requests["served"]["disk"], 1) << js.dump();  // the second run: the remote hit filled the disk
  EXPECT_EQ(requests["compiled"], 0) << js.dump();
  EXPECT_GT(requests["compile_us_saved"].get<long long>(), 0) << js.dump();
  EXPECT_EQ(js["misses"], 1) << js.dump();  // the disk tier missed the first: a lookup, not a request
  const auto ja = json_of(run_cli(m_tmp.path() / "hostA", "", "stats --json").out)["requests"];
  EXPECT_EQ(ja["compiled"], 1) << ja.dump();
  EXPECT_EQ(ja["served"]["total"], 0) << ja.dump();
}

}  // namespace
}  // namespace kcache
