// The team tier on a Redis Cluster end to end: real `kcache` processes with
// their own cache directories ("hosts") sharing a real cluster of 3 masters
// and 3 replicas through `--remote redis+cluster://...`, real NVRTC; the
// master holding the entry SIGKILLed mid-run.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "store/remote/redis_cluster_backend.hpp"
#include "support/files.hpp"
#include "support/redis_cluster.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

struct Run {
  int status = -1;
  std::string out;
};

// Runs the kcache command with KCACHE_DIR=`cache`.
Run run_cli(const fs::path& cache, const std::string& args) {
  const std::string cmd = "KCACHE_DIR='" + cache.string() + "' '" + KCACHE_CLI_PATH + "' " + args + " 2>&1";
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

nlohmann::json json_of(const std::string& out) { return nlohmann::json::parse(out.substr(out.find('{'))); }

TEST(CliRemoteCluster, HostsShareAClusterAndACompileSurvivesAKilledMaster) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  std::string why;
  auto cluster = test::RedisCluster::start(tmp.path() / "cluster", &why);
  ASSERT_NE(cluster, nullptr) << why;
  const std::string remote = "--remote '" + cluster->url() + "?connect_timeout_ms=300&timeout_ms=1000' ";

  auto ping = run_cli(tmp.path() / "hostA", remote + "remote ping");
  ASSERT_EQ(ping.status, 0) << ping.out;
  EXPECT_NE(ping.out.find("(cluster, state ok): 3 masters 127.0.0.1:"), std::string::npos) << ping.out;

  const auto src = std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/trivial.cu";
  const std::string compile = remote + "compile " + src + " --target cubin --arch sm_90 --json -o ";
  auto fresh = run_cli(tmp.path() / "fresh", "compile " + src + " --target cubin --arch sm_90 -o " +
                                                 (tmp.path() / "fresh.cubin").string());
  ASSERT_EQ(fresh.status, 0) << fresh.out;
  const std::string expected = test::read_file(tmp.path() / "fresh.cubin");

  // Host A compiles and publishes to the master of the key's slot.
  auto a = run_cli(tmp.path() / "hostA", compile + (tmp.path() / "a.cubin").string());
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_FALSE(json_of(a.out)["hit"].get<bool>());
  const std::string name = "kcache:v1:" + json_of(a.out)["key"].get<std::string>();
  auto backend = *remote::RedisClusterBackend::open(*remote::parse_remote_url(cluster->url()));
  const int master = backend->master_of(remote::cluster_key_slot(name)).port;
  ASSERT_NE(master, 0);
  EXPECT_EQ(cluster->node_on(master)->cli({"EXISTS", name}), "1");

  // Host B (empty local store) hits from the cluster without compiling.
  auto b = run_cli(tmp.path() / "hostB", compile + (tmp.path() / "b.cubin").string());
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(json_of(b.out)["hit"].get<bool>()) << b.out;
  EXPECT_EQ(json_of(b.out)["compile_us"].get<long long>(), 0) << b.out;
  EXPECT_EQ(test::read_file(tmp.path() / "b.cubin"), expected);

  // The master holding the entry dies (its replica holds the entry too).
  ASSERT_TRUE(cluster->wait_ok(std::chrono::seconds(10)));
  cluster->node_on(master)->kill();
  // Host C, right away: the remote fails or has already failed over; either
  // way the compile happens (or hits) and its bytes are right.
  auto c = run_cli(tmp.path() / "hostC", compile + (tmp.path() / "c.cubin").string());
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(test::read_file(tmp.path() / "c.cubin"), expected);

  // After the failover, host D hits from the promoted replica.
  ASSERT_TRUE(cluster->wait_failover(master, std::chrono::seconds(30))) << "no failover within 30 s";
  auto d = run_cli(tmp.path() / "hostD", compile + (tmp.path() / "d.cubin").string());
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_TRUE(json_of(d.out)["hit"].get<bool>()) << d.out;
  EXPECT_EQ(json_of(d.out)["compile_us"].get<long long>(), 0) << d.out;
  EXPECT_EQ(test::read_file(tmp.path() / "d.cubin"), expected);
  auto after = run_cli(tmp.path() / "hostD", remote + "remote ping");
  ASSERT_EQ(after.status, 0) << after.out;
  EXPECT_EQ(after.out.find("127.0.0.1:" + std::to_string(master) + " ["), std::string::npos) << after.out;
}

}  // namespace
}  // namespace kcache
