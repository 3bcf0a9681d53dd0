// One compile per key across hosts, end to end: real `kcache compile`
// processes, each with its own cache directory (a "host"), sharing one real
// redis-server (or a real Redis Cluster), real NVRTC. Herd of 16 (C05 across
// hosts), the lease owner SIGKILLed mid-compile (C06 across hosts), a
// cluster, the cluster master of a held lease SIGKILLed (failover), and a
// server that is hung.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/remote/redis_cluster_backend.hpp"
#include "support/files.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A kernel that takes NVRTC a while (deep template instantiation), so that a
// herd really overlaps and an owner can be killed mid-compile. `tag` makes
// the key unique to the test.
fs::path write_slow_kernel(const fs::path& dir, const std::string& tag, int calls) {
  std::string src = "template <int N> __device__ float f(float x) { return f<N - 1>(x * 1.0001f + N); }\n"
                    "template <> __device__ float f<0>(float x) { return x; }\n"
                    "extern \"C\" __global__ void slow_" + tag + "(float* p) {\n  float v = p[threadIdx.x];\n";
  for (int i = 0; i < calls; ++i) {
    src += "  v += f<" + std::to_string(100 + i) + ">(v);\n";
  }
  src += "  p[threadIdx.x] = v;\n}\n";
  const fs::path path = dir / ("slow_" + tag + ".cu");
  std::ofstream(path) << src;
  return path;
}

// A `kcache` process started in the background: stdout+stderr go to a file.
struct Host {
  pid_t pid = -1;
  fs::path out;
};

// Starts `kcache <args>` with KCACHE_DIR=`cache` and `env` ("A=b C=d"), in
// the directory `cwd` when given.
Host spawn(const fs::path& cache, const std::string& env, const std::string& args, const fs::path& out,
           const fs::path& cwd = {}) {
  const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd.string() + "' && ") + "exec env KCACHE_DIR='" +
                          cache.string() + "' " + env + " '" + KCACHE_CLI_PATH + "' " + args;
  Host h;
  h.out = out;
  h.pid = ::fork();
  if (h.pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return h;
}

// Waits for `h`; its exit code (128 + signal when killed).
int finish(const Host& h) {
  int st = 0;
  if (::waitpid(h.pid, &st, 0) != h.pid) {
    return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string run_cli(const fs::path& cache, const std::string& env, const std::string& args) {
  const std::string cmd = "KCACHE_DIR='" + cache.string() + "' " + env + " '" + KCACHE_CLI_PATH + "' " + args + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    out.append(buf, n);
  }
  ::pclose(p);
  return out;
}

nlohmann::json json_of(const std::string& out) { return nlohmann::json::parse(out.substr(out.find('{'))); }

// The remote counters of a host's cache directory (`kcache stats --json`).
nlohmann::json remote_stats(const fs::path& cache) { return json_of(run_cli(cache, "", "stats --json"))["remote"]; }

// A fresh compile of `src` with no cache at all: the bytes every host must get.
std::string fresh_compile(const fs::path& dir, const fs::path& src) {
  const fs::path out = dir / "fresh.cubin";
  run_cli(dir / "fresh", "KCACHE_DISABLE=1", "compile " + src.string() + " --target cubin --arch sm_90 -o " + out.string());
  return test::read_file(out);
}

// 16 hosts (distinct cache directories) compile one cold key at once through
// `remote_url`: exactly one compiles, every output is the same bytes, as a
// fresh compile's, and no one waited out the lease.
void herd(const fs::path& dir, const std::string& remote_url, int hosts) {
  const fs::path src = write_slow_kernel(dir, "herd", 40);
  const std::string env = "KCACHE_REMOTE='" + remote_url + "'";
  std::vector<Host> running;
  for (int i = 0; i < hosts; ++i) {
    const fs::path out = dir / ("out" + std::to_string(i) + ".cubin");
    running.push_back(spawn(dir / ("host" + std::to_string(i)), env,
                            "compile " + src.string() + " --target cubin --arch sm_90 --json -o " + out.string(),
                            dir / ("log" + std::to_string(i))));
  }
  int compiled = 0;
  std::string key;
  for (int i = 0; i < hosts; ++i) {
    const int status = finish(running[i]);
    const std::string log = test::read_file(running[i].out);
    ASSERT_EQ(status, 0) << log;
    const auto j = json_of(log);
    compiled += j["hit"].get<bool>() ? 0 : 1;
    if (key.empty()) {
      key = j["key"].get<std::string>();
    }
    EXPECT_EQ(j["key"].get<std::string>(), key);
  }
  EXPECT_EQ(compiled, 1) << "one compile per key across " << hosts << " hosts";
  const std::string expected = fresh_compile(dir, src);
  ASSERT_FALSE(expected.empty());
  std::uint64_t waits = 0, timeouts = 0, taken = 0;
  for (int i = 0; i < hosts; ++i) {
    EXPECT_EQ(test::read_file(dir / ("out" + std::to_string(i) + ".cubin")), expected) << "host " << i;
    const auto rs = remote_stats(dir / ("host" + std::to_string(i)));
    waits += rs["lease_waits"].get<std::uint64_t>();
    timeouts += rs["lease_timeouts"].get<std::uint64_t>();
    taken += rs["lease_taken"].get<std::uint64_t>();
  }
  EXPECT_EQ(timeouts, 0U);
  EXPECT_GE(taken, 1U);
  std::printf("herd of %d: %d compile(s), %llu lease wait(s), %llu lease(s) taken\n", hosts, compiled,
              static_cast<unsigned long long>(waits), static_cast<unsigned long long>(taken));
}

class CliRemoteLease : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_server = test::RedisServer::start(m_tmp.path() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
  }
  test::TempDir m_tmp;
  std::unique_ptr<test::RedisServer> m_server;
};

TEST_F(CliRemoteLease, SixteenHostsAndOneColdKeyCompileOnce) {
  KCACHE_REQUIRE_TOOLKIT();
  herd(m_tmp.path(), m_server->url(), 16);
  EXPECT_EQ(m_server->cli({"KEYS", "kcache:v1:lease:*"}), "") << "every lease was released";
}

TEST_F(CliRemoteLease, AKilledOwnerIsTakenOverByAWaiterWithinTheLeaseTime) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path src = write_slow_kernel(m_tmp.path(), "killed", 60);
  // A short ttl so that the dead owner's lease expires soon; a long wait, so
  // that only a takeover (not a timeout) lets the waiters go on.
  const std::string env = "KCACHE_REMOTE='" + m_server->url() +
                          "' KCACHE_REMOTE_LEASE_TTL_MS=1500 KCACHE_REMOTE_LEASE_WAIT_MS=600000";
  const std::string compile = "compile " + src.string() + " --target cubin --arch sm_90 --json -o ";
  Host owner = spawn(m_tmp.path() / "owner", env, compile + (m_tmp.path() / "owner.cubin").string(),
                     m_tmp.path() / "owner.log");
  // Wait (bounded) for the owner to take the lease: it is compiling now.
  std::string lease;
  for (int i = 0; i < 6000 && lease.empty(); ++i) {
    lease = m_server->cli({"KEYS", "kcache:v1:lease:*"});
    if (lease.empty()) {
      std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_FALSE(lease.empty()) << test::read_file(owner.out);
  const std::string object = "kcache:v1:" + lease.substr(std::string("kcache:v1:lease:").size());
  std::vector<Host> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(spawn(m_tmp.path() / ("waiter" + std::to_string(i)), env,
                            compile + (m_tmp.path() / ("w" + std::to_string(i) + ".cubin")).string(),
                            m_tmp.path() / ("waiter" + std::to_string(i) + ".log")));
  }
  std::this_thread::sleep_for(300ms);  // sequencing only: let the waiters find the lease held
  ::kill(owner.pid, SIGKILL);
  EXPECT_EQ(finish(owner), 128 + SIGKILL);
  ASSERT_EQ(m_server->cli({"EXISTS", object}), "0") << "the owner was killed before it published";
  int compiled = 0;
  for (const Host& w : waiters) {
    const int status = finish(w);
    const std::string log = test::read_file(w.out);
    ASSERT_EQ(status, 0) << log;
    compiled += json_of(log)["hit"].get<bool>() ? 0 : 1;
  }
  EXPECT_EQ(compiled, 1) << "one waiter took over and compiled; the others got its entry";
  std::uint64_t takeovers = 0, timeouts = 0;
  for (int i = 0; i < 3; ++i) {
    const auto rs = remote_stats(m_tmp.path() / ("waiter" + std::to_string(i)));
    takeovers += rs["lease_takeovers"].get<std::uint64_t>();
    timeouts += rs["lease_timeouts"].get<std::uint64_t>();
  }
  EXPECT_EQ(takeovers, 1U);
  EXPECT_EQ(timeouts, 0U) << "the dead owner's lease expired (ttl 1.5 s) long before the 600 s wait";
  const std::string expected = fresh_compile(m_tmp.path(), src);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(test::read_file(m_tmp.path() / ("w" + std::to_string(i) + ".cubin")), expected) << i;
  }
  EXPECT_EQ(m_server->cli({"EXISTS", object}), "1");
}

TEST_F(CliRemoteLease, AHungServerNeverHoldsACompileBeyondItsTimeouts) {
  KCACHE_REQUIRE_TOOLKIT();
  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  m_server->pause();  // SIGSTOP: connects succeed (the kernel accepts), nothing answers
  const std::string env = "KCACHE_REMOTE='" + m_server->url() + "?connect_timeout_ms=200&timeout_ms=300'";
  const std::string out = run_cli(m_tmp.path() / "host", env,
                                  "compile " + src + " --target cubin --arch sm_90 --json -o " +
                                      (m_tmp.path() / "k.cubin").string());
  m_server->resume();
  ASSERT_TRUE(fs::exists(m_tmp.path() / "k.cubin")) << out;
  EXPECT_FALSE(json_of(out)["hit"].get<bool>()) << out;
  const auto rs = remote_stats(m_tmp.path() / "host");
  EXPECT_EQ(rs["lease_errors"].get<int>(), 1) << out;
  EXPECT_EQ(rs["lease_taken"].get<int>(), 0) << out;
  // Down (refused) is the same: the compile happens, nothing waits.
  m_server->kill();
  const std::string down = run_cli(m_tmp.path() / "host2", env,
                                   "compile " + src + " --target cubin --arch sm_90 --json -o " +
                                       (m_tmp.path() / "k2.cubin").string());
  EXPECT_FALSE(json_of(down)["hit"].get<bool>()) << down;
  EXPECT_EQ(test::read_file(m_tmp.path() / "k2.cubin"), test::read_file(m_tmp.path() / "k.cubin"));
}

TEST_F(CliRemoteLease, WorkerPoolHostsTakeTheLeaseWhereTheFlightIsOwned) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path a = write_slow_kernel(m_tmp.path(), "pool_a", 40);
  const fs::path b = write_slow_kernel(m_tmp.path(), "pool_b", 40);
  const std::string env = "KCACHE_REMOTE='" + m_server->url() + "'";
  constexpr int k_hosts = 4;
  std::vector<Host> running;
  for (int i = 0; i < k_hosts; ++i) {
    const fs::path cwd = m_tmp.path() / ("cwd" + std::to_string(i));
    fs::create_directories(cwd);
    // Two files and -j 2: the worker pool compiles, this process owns the flights.
    running.push_back(spawn(m_tmp.path() / ("host" + std::to_string(i)), env,
                            "compile -j 2 " + a.string() + " " + b.string() + " --target cubin --arch sm_90 -q",
                            m_tmp.path() / ("log" + std::to_string(i)), cwd));
  }
  for (const Host& h : running) {
    ASSERT_EQ(finish(h), 0) << test::read_file(h.out);
  }
  // Every compile uploads its entry once (a second compile of a key would
  // find the object there): the uploads count the compiles of the team.
  std::uint64_t uploads = 0, present = 0;
  for (int i = 0; i < k_hosts; ++i) {
    const auto rs = remote_stats(m_tmp.path() / ("host" + std::to_string(i)));
    uploads += rs["puts"].get<std::uint64_t>();
    present += rs["puts_already_present"].get<std::uint64_t>();
    EXPECT_EQ(rs["lease_timeouts"].get<std::uint64_t>(), 0U);
  }
  EXPECT_EQ(uploads, 2U) << "one compile per key across " << k_hosts << " hosts";
  EXPECT_EQ(present, 0U) << "no key was compiled twice";
  for (int i = 1; i < k_hosts; ++i) {
    const fs::path cwd = m_tmp.path() / ("cwd" + std::to_string(i));
    EXPECT_EQ(test::read_file(cwd / "slow_pool_a.cubin"), test::read_file(m_tmp.path() / "cwd0" / "slow_pool_a.cubin"));
    EXPECT_EQ(test::read_file(cwd / "slow_pool_b.cubin"), test::read_file(m_tmp.path() / "cwd0" / "slow_pool_b.cubin"));
  }
  EXPECT_FALSE(test::read_file(m_tmp.path() / "cwd0" / "slow_pool_a.cubin").empty());
}

// Hosts sharing a real Redis Cluster of 3 masters and 3 replicas.
class CliRemoteLeaseCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_cluster = test::RedisCluster::start(m_tmp.path() / "cluster", &why);
    ASSERT_NE(m_cluster, nullptr) << why;
  }
  test::TempDir m_tmp;
  std::unique_ptr<test::RedisCluster> m_cluster;
};

TEST_F(CliRemoteLeaseCluster, EightHostsOnARedisClusterCompileOnce) {
  KCACHE_REQUIRE_TOOLKIT();
  herd(m_tmp.path(), m_cluster->url(), 8);
}

// Every host still running when the test ends (an assertion failed) is
// continued, SIGKILLed and reaped, so that no stopped child outlives it.
struct ReapOnExit {
  std::vector<Host>* hosts;
  ~ReapOnExit() {
    for (const Host& h : *hosts) {
      if (::waitpid(h.pid, nullptr, WNOHANG) == 0) {
        ::kill(h.pid, SIGKILL);
        ::kill(h.pid, SIGCONT);
        ::waitpid(h.pid, nullptr, 0);
      }
    }
  }
};

// The lease keys held by the first running node of `cluster` (a master or a
// replica) that holds any; "" when none does.
std::string cluster_leases(test::RedisCluster& cluster) {
  std::string out;
  for (std::size_t i = 0; i < cluster.size() && out.empty(); ++i) {
    if (cluster.node(i).pid() > 0) {
      out = cluster.node(i).cli({"KEYS", "kcache:v1:lease:*"});
    }
  }
  return out;
}

// A lease counter of a host's cache directory, 0 while it has none yet.
std::uint64_t lease_counter(const fs::path& cache, const char* name) {
  const std::string out = run_cli(cache, "", "stats --json");
  const auto j = nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
  return j.is_discarded() || !j.contains("remote") ? 0 : j["remote"].value(name, std::uint64_t{0});
}

// The first half of a failover under a held lease: spawns an owner (hosts[0])
// compiling with `compile` + its output and `env`, SIGSTOPs it once it holds
// the lease (before it publishes: deterministic, not a race), waits until the
// replica holds the lease too, then spawns three waiters (hosts[1..3]) and
// waits until each waits. Returns the lease's name; "" (and a failure
// recorded) when a step did not happen.
std::string owner_stopped_with_three_waiters(test::RedisCluster& cluster, const fs::path& dir, const std::string& env,
                                             const std::string& compile, std::vector<Host>& hosts, int waiters = 3) {
  hosts.push_back(spawn(dir / "owner", env, compile + (dir / "owner.cubin").string(), dir / "owner.log"));
  std::string lease;
  for (int i = 0; i < 3000 && lease.empty(); ++i) {
    lease = cluster_leases(cluster);
    if (lease.empty()) {
      std::this_thread::sleep_for(5ms);
    }
  }
  if (lease.empty()) {
    ADD_FAILURE() << "no lease taken: " << test::read_file(hosts[0].out);
    return "";
  }
  ::kill(hosts[0].pid, SIGSTOP);
  if (!cluster.wait_ok(std::chrono::seconds(10))) {
    ADD_FAILURE() << "the replica does not hold the lease";
    return "";
  }
  for (int i = 0; i < waiters; ++i) {
    hosts.push_back(spawn(dir / ("waiter" + std::to_string(i)), env,
                          compile + (dir / ("w" + std::to_string(i) + ".cubin")).string(),
                          dir / ("waiter" + std::to_string(i) + ".log")));
  }
  for (int i = 0; i < waiters; ++i) {
    const fs::path waiter = dir / ("waiter" + std::to_string(i));
    for (int t = 0; t < 600 && lease_counter(waiter, "lease_waits") == 0; ++t) {
      std::this_thread::sleep_for(50ms);
    }
    if (lease_counter(waiter, "lease_waits") != 1U) {
      ADD_FAILURE() << "waiter " << i << " did not wait: " << test::read_file(hosts[1 + i].out);
      return "";
    }
  }
  return lease;
}

// The second half: waits for every host (each must exit 0; their logs go to
// `logs`) and returns how many compiled; -1 when one failed.
int compiles_of(const std::vector<Host>& hosts, std::vector<std::string>& logs) {
  int compiled = 0;
  for (const Host& h : hosts) {
    const int status = finish(h);
    logs.push_back(test::read_file(h.out));
    if (status != 0) {
      ADD_FAILURE() << "exit " << status << ": " << logs.back();
      return -1;
    }
    compiled += json_of(logs.back())["hit"].get<bool>() ? 0 : 1;
  }
  return compiled;
}

// The waiters' (hosts[1..3]) output files hold `expected`; their lease
// counter `name`, summed.
std::uint64_t waiters_counter(const fs::path& dir, const std::string& expected, const std::vector<std::string>& logs,
                              const char* name, int waiters = 3) {
  std::uint64_t sum = 0;
  for (int i = 0; i < waiters; ++i) {
    EXPECT_EQ(test::read_file(dir / ("w" + std::to_string(i) + ".cubin")), expected) << logs[1 + i];
    sum += lease_counter(dir / ("waiter" + std::to_string(i)), name);
  }
  return sum;
}

// The master serving a held lease's slot is SIGKILLed while its owner
// compiles and three hosts wait; the replica takes over (CLUSTER FAILOVER
// TAKEOVER, as an operator or the cluster's own vote would). The waiters'
// lease polls meet the dead master first: they must follow the new topology
// and keep waiting, not fall back to compiling. The owner is SIGSTOPped while
// the master dies (a compile that has not finished yet, deterministically),
// then continued. A failover may lose a lease not yet replicated: then one
// waiter compiles too (at most two compiles), never wrong bytes.
TEST_F(CliRemoteLeaseCluster, AKilledLeaseMasterFailsOverAndTheWaitersFollowTheNewTopology) {
  KCACHE_REQUIRE_TOOLKIT();
  const fs::path src = write_slow_kernel(m_tmp.path(), "failover", 40);
  constexpr int k_ttl_ms = 10000, k_wait_ms = 60000;
  const std::string env = "KCACHE_REMOTE='" + m_cluster->url() +
                          "?connect_timeout_ms=300&timeout_ms=2000' KCACHE_REMOTE_LEASE_TTL_MS=" +
                          std::to_string(k_ttl_ms) + " KCACHE_REMOTE_LEASE_WAIT_MS=" + std::to_string(k_wait_ms);
  const std::string compile = "compile " + src.string() + " --target cubin --arch sm_90 --json -o ";
  std::vector<Host> hosts;
  hosts.reserve(4);
  ReapOnExit reap{&hosts};
  const std::string lease = owner_stopped_with_three_waiters(*m_cluster, m_tmp.path(), env, compile, hosts);
  ASSERT_FALSE(lease.empty());
  auto backend = *remote::RedisClusterBackend::open(*remote::parse_remote_url(m_cluster->url()));
  const int master = backend->master_of(remote::cluster_key_slot(lease)).port;
  ASSERT_NE(master, 0);
  test::RedisServer* replica = m_cluster->replica_of(master);
  ASSERT_NE(replica, nullptr);

  const auto killed_at = std::chrono::steady_clock::now();
  m_cluster->node_on(master)->kill();
  std::this_thread::sleep_for(300ms);  // sequencing only: the waiters' polls meet the dead master
  replica->cli({"CLUSTER", "FAILOVER", "TAKEOVER"});
  ASSERT_TRUE(m_cluster->wait_failover(master, std::chrono::seconds(30))) << "no failover within 30 s";
  ::kill(hosts[0].pid, SIGCONT);

  std::vector<std::string> logs;
  const int compiled = compiles_of(hosts, logs);
  ASSERT_GE(compiled, 0);
  // Generous: a waiter that found nothing would compile after its wait, and
  // a lost lease is taken over at once; neither is a hang.
  const auto waited = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(waited, std::chrono::milliseconds(k_ttl_ms + k_wait_ms));
  EXPECT_FALSE(json_of(logs[0])["hit"].get<bool>()) << "the owner compiled";
  EXPECT_LE(compiled, 2) << "a failover may lose one lease, no more";
  const std::string expected = test::read_file(m_tmp.path() / "owner.cubin");
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(waiters_counter(m_tmp.path(), expected, logs, "lease_errors"), 0U)
      << "no waiter gave up on the lease because its master died";
  EXPECT_EQ(waiters_counter(m_tmp.path(), expected, logs, "lease_timeouts"), 0U);

  // The entry is on the cluster after the failover: a new host hits it.
  const std::string fresh = run_cli(m_tmp.path() / "new_host", env, compile + (m_tmp.path() / "new.cubin").string());
  EXPECT_TRUE(json_of(fresh)["hit"].get<bool>()) << fresh;
  EXPECT_EQ(json_of(fresh)["compile_us"].get<long long>(), 0) << fresh;
  EXPECT_EQ(test::read_file(m_tmp.path() / "new.cubin"), expected);
  EXPECT_EQ(cluster_leases(*m_cluster), "") << "every lease was released";
  std::printf("failover under a held lease: %d compile(s)\n", compiled);
}

// A slow kernel whose lease and object live on one master (`same`) or on
// two: its source, its bytes (compiled once, without a remote) and the port
// of its lease's master; `expected` empty when none of 24 tags places it so.
struct PlacedKernel {
  fs::path src;
  std::string expected;
  int lease_master = 0;
};
PlacedKernel kernel_placed(const fs::path& dir, remote::RedisClusterBackend& backend, const std::string& tag,
                           bool same) {
  PlacedKernel k;
  for (int i = 0; i < 24 && k.expected.empty(); ++i) {
    k.src = write_slow_kernel(dir, tag + std::to_string(i), 40);
    const fs::path probe = dir / ("probe-" + tag + std::to_string(i) + ".cubin");
    const std::string out = run_cli(dir / ("probe-" + tag + std::to_string(i)), "",
                                    "compile " + k.src.string() + " --target cubin --arch sm_90 --json -o " +
                                        probe.string());
    const std::string key = json_of(out)["key"].get<std::string>();
    k.lease_master = backend.master_of(remote::cluster_key_slot("kcache:v1:lease:" + key)).port;
    if ((k.lease_master == backend.master_of(remote::cluster_key_slot("kcache:v1:" + key)).port) == same) {
      k.expected = test::read_file(probe);
    }
  }
  return k;
}

// Issue 18 item 3, with Redis's defaults: cluster-node-timeout 15000 (a
// failover takes longer than connect_timeout_ms + 2 x timeout_ms) and no
// operator's TAKEOVER. The master of the lease's slot is SIGKILLed while the
// owner holds the lease and three hosts wait; the owner then finishes and
// publishes (its object lives on another master), and the cluster promotes
// the replica by its own vote. The waiters' lease commands ride the failover
// out instead of failing: the herd compiles once, no lease error.
TEST(CliRemoteLeaseFailover, AHerdWaitingThroughADefaultFailoverStillCompilesOnce) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  std::string why;
  auto cluster = test::RedisCluster::start(tmp.path() / "cluster", &why, 3, 1, 15000);
  ASSERT_NE(cluster, nullptr) << why;
  auto backend = *remote::RedisClusterBackend::open(*remote::parse_remote_url(cluster->url()));
  // A kernel whose object and lease live on different masters, so that the
  // owner's upload does not meet the failover.
  const PlacedKernel kernel = kernel_placed(tmp.path(), *backend, "dflt", false);
  const fs::path& src = kernel.src;
  const std::string& expected = kernel.expected;
  const int lease_master = kernel.lease_master;
  ASSERT_FALSE(expected.empty());
  ASSERT_NE(lease_master, 0);
  constexpr int k_ttl_ms = 10000, k_wait_ms = 120000;
  const std::string env = "KCACHE_REMOTE='" + cluster->url() + "' KCACHE_REMOTE_LEASE_TTL_MS=" +
                          std::to_string(k_ttl_ms) + " KCACHE_REMOTE_LEASE_WAIT_MS=" + std::to_string(k_wait_ms);
  const std::string compile = "compile " + src.string() + " --target cubin --arch sm_90 --json -o ";
  std::vector<Host> hosts;
  hosts.reserve(4);
  ReapOnExit reap{&hosts};
  const std::string lease = owner_stopped_with_three_waiters(*cluster, tmp.path(), env, compile, hosts);
  ASSERT_FALSE(lease.empty());
  ASSERT_EQ(backend->master_of(remote::cluster_key_slot(lease)).port, lease_master);
  const auto killed_at = std::chrono::steady_clock::now();
  cluster->node_on(lease_master)->kill();
  ::kill(hosts[0].pid, SIGCONT);  // the owner finishes and publishes during the failover

  std::vector<std::string> logs;
  const int compiled = compiles_of(hosts, logs);
  ASSERT_GE(compiled, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_TRUE(cluster->wait_failover(lease_master, std::chrono::seconds(60))) << "the cluster failed over";
  EXPECT_EQ(compiled, 1) << "one compile across the failover";
  EXPECT_EQ(test::read_file(tmp.path() / "owner.cubin"), expected);
  EXPECT_EQ(waiters_counter(tmp.path(), expected, logs, "lease_errors"), 0U)
      << "no waiter gave up on the lease because its master died";
  EXPECT_EQ(waiters_counter(tmp.path(), expected, logs, "lease_timeouts"), 0U);
  std::printf("default failover (cluster-node-timeout 15000) under a herd of 4: %d compile(s), the herd done "
              "%.1f s after the kill\n",
              compiled, seconds);
}

// A herd of `hosts` on a cluster whose failover outlasts one remote
// operation's deadline (cluster-node-timeout 4 s, an operation 1.2 s: the
// owner's compile ends well within the failover, whatever the load): the
// master that holds both the lease's and the entry's slot is SIGKILLed while
// the owner holds the lease (stopped before it publishes), and the owner then
// finishes, so that its upload meets the failover. Waiting for the new master
// is not lost time: it is charged to no budget, the upload rides the failover
// out as the waiters' lease polls do, and they hit it: one compile.
void herd_across_a_failover_of_the_owners_upload(int hosts) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  std::string why;
  auto cluster = test::RedisCluster::start(tmp.path() / "cluster", &why, 3, 1, 4000);
  ASSERT_NE(cluster, nullptr) << why;
  auto backend = *remote::RedisClusterBackend::open(*remote::parse_remote_url(cluster->url()));
  // A kernel whose lease and object live on one master: the owner's upload goes to the dead one.
  const PlacedKernel kernel = kernel_placed(tmp.path(), *backend, "up" + std::to_string(hosts) + "x", true);
  const fs::path& src = kernel.src;
  const std::string& expected = kernel.expected;
  const int master = kernel.lease_master;
  ASSERT_FALSE(expected.empty()) << "no kernel of 24 has its lease and object on one master";
  const std::string env = "KCACHE_REMOTE='" + cluster->url() +
                          "?connect_timeout_ms=200&timeout_ms=500' KCACHE_REMOTE_LEASE_TTL_MS=10000 "
                          "KCACHE_REMOTE_LEASE_WAIT_MS=120000";
  const std::string compile = "compile " + src.string() + " --target cubin --arch sm_90 --json -o ";
  std::vector<Host> running;
  running.reserve(static_cast<std::size_t>(hosts));
  ReapOnExit reap{&running};
  const std::string lease =
      owner_stopped_with_three_waiters(*cluster, tmp.path(), env, compile, running, hosts - 1);
  ASSERT_FALSE(lease.empty());
  ASSERT_EQ(backend->master_of(remote::cluster_key_slot(lease)).port, master);
  const auto killed_at = std::chrono::steady_clock::now();
  cluster->node_on(master)->kill();
  ::kill(running[0].pid, SIGCONT);  // the owner finishes: its upload meets the dead master
  std::vector<std::string> logs;
  const int compiled = compiles_of(running, logs);
  ASSERT_GE(compiled, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_TRUE(cluster->wait_failover(master, std::chrono::seconds(60))) << "the cluster failed over";
  EXPECT_EQ(test::read_file(tmp.path() / "owner.cubin"), expected);
  EXPECT_EQ(waiters_counter(tmp.path(), expected, logs, "lease_timeouts", hosts - 1), 0U);
  EXPECT_EQ(lease_counter(tmp.path() / "owner", "budget_skipped"), 0U)
      << "the owner's wait for the new master was charged as lost time: " << logs[0];
  EXPECT_EQ(compiled, 1) << "one compile for the herd of " << hosts << " across the failover";
  std::printf("failover under the owner's upload, herd of %d: %d compile(s), the herd done %.1f s after the kill\n",
              hosts, compiled, seconds);
}

TEST(CliRemoteLeaseFailover, AHerdOfFourCompilesOnceWhenTheOwnersUploadMeetsTheFailover) {
  herd_across_a_failover_of_the_owners_upload(4);
}

TEST(CliRemoteLeaseFailover, AHerdOfEightCompilesOnceWhenTheOwnersUploadMeetsTheFailover) {
  herd_across_a_failover_of_the_owners_upload(8);
}

}  // namespace
}  // namespace kcache
