// A remote that is hung, or holds leases kcache did not write, against real
// `kcache compile` processes (issue 18 items 2 and 5): a server that accepts
// and never answers costs one timeout per build, not one per process (the
// breaker's state is shared by the processes of a cache directory); the
// remote work of one process has a budget; a lease stall says why after a
// second, and a foreign lease (no expiry) is taken over after the ttl.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "support/redis_server.hpp"
#include "support/silent_server.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class CliRemoteHung : public test::CliShell {
 protected:
  // Writes n small kernels k0.cu ... k{n-1}.cu (distinct keys, tagged by `tag`).
  void write_kernels(int n, const std::string& tag) {
    for (int i = 0; i < n; ++i) {
      test::write_file(dir() / ("k" + std::to_string(i) + ".cu"),
                       "extern \"C\" __global__ void k_" + tag + std::to_string(i) +
                           "(float* p) { p[threadIdx.x] *= " + std::to_string(i + 2) + ".0f; }\n");
    }
  }

  // A script that runs `n` compiles, one `kcache compile` process each, with
  // the cache directory `cache` and `env`, and prints the milliseconds they took.
  static std::string build_script(int n, const std::string& cache, const std::string& env) {
    return "t0=$(date +%s%N)\nfor i in $(seq 0 " + std::to_string(n - 1) + "); do\n  KCACHE_DIR='" + cache +
           "' " + env + " \"$K\" compile k$i.cu --target ptx --arch sm_90 -o k$i." + cache +
           ".ptx 2>>" + cache + ".err || echo FAILED $i\ndone\necho $(( ($(date +%s%N) - t0) / 1000000 ))";
  }

  nlohmann::json stats(const std::string& cache) {
    const test::ShellRun r = sh("KCACHE_DIR='" + (dir() / cache).string() + "' \"$K\" stats --json");
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
};

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// 20 files built as 20 `kcache compile` processes, against a server that
// accepts and never answers: the whole build pays one timeout, not four per
// process (get, second get, lease SET, exit flush: 8.2 s each before).
TEST_F(CliRemoteHung, TwentyProcessesAgainstAHungServerPayOneTimeout) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string why;
  auto server = test::SilentServer::start(&why);
  ASSERT_NE(server, nullptr) << why;
  constexpr int k_files = 20;
  constexpr int k_timeout_ms = 1000;
  write_kernels(k_files, "hung");
  // Baseline: the same build without a remote, in the same run.
  const test::ShellRun base = sh(build_script(k_files, "base", ""));
  ASSERT_EQ(base.rc, 0) << base.err;
  ASSERT_EQ(base.out.find("FAILED"), std::string::npos) << base.out << test::read_file(dir() / "base.err");
  const std::string env = "KCACHE_REMOTE='" + server->url() + "?timeout_ms=" + std::to_string(k_timeout_ms) + "'";
  const test::ShellRun hung = sh(build_script(k_files, "hung", env));
  ASSERT_EQ(hung.rc, 0) << hung.err;
  ASSERT_EQ(hung.out.find("FAILED"), std::string::npos) << hung.out << test::read_file(dir() / "hung.err");
  for (int i = 0; i < k_files; ++i) {
    const std::string n = std::to_string(i);
    ASSERT_EQ(test::read_file(dir() / ("k" + n + ".hung.ptx")), test::read_file(dir() / ("k" + n + ".base.ptx")));
  }
  const long base_ms = std::stol(base.out);
  const long hung_ms = std::stol(hung.out);
  const long added = hung_ms - base_ms;
  std::printf("20 processes: %ld ms without a remote, %ld ms with a hung one: %ld ms added (timeout_ms=%d)\n",
              base_ms, hung_ms, added, k_timeout_ms);
  // A generous bound that still tells one timeout per build from one per
  // process (20 x at least 1 s): one timeout + 3 s of slack for a loaded machine.
  EXPECT_LE(added, k_timeout_ms + 3000) << test::read_file(dir() / "hung.err");

  // The breaker opened once, in the first process, and every later process
  // skipped the remote at once; `kcache stats` shows its state per remote.
  const nlohmann::json j = stats("hung");
  ASSERT_TRUE(j.contains("remotes")) << j.dump();
  ASSERT_EQ(j["remotes"].size(), 1U) << j.dump();
  const nlohmann::json& r = j["remotes"][0];
  EXPECT_EQ(r["server"], "redis://127.0.0.1:" + std::to_string(server->port()) + "/0");
  EXPECT_EQ(r["breaker"], "open");
  EXPECT_EQ(r["breaker_opened"].get<int>(), 1);
  EXPECT_EQ(r["errors"].get<int>(), 1) << r.dump();
  EXPECT_GE(r["skipped"].get<int>(), k_files - 1) << r.dump();
  const std::string err = test::read_file(dir() / "hung.err");
  EXPECT_EQ(count_of(err, " failed ("), 1) << err;
  EXPECT_EQ(count_of(err, "127.0.0.1:" + std::to_string(server->port())), k_files)
      << "one line per process, naming the remote once: " << err;
  const test::ShellRun text = sh("KCACHE_DIR='" + (dir() / "hung").string() + "' \"$K\" stats");
  EXPECT_NE(text.out.find("open: skipped for"), std::string::npos) << text.out;
}

// With the breaker off (remote_breaker_failures=0), the budget alone bounds
// what one process loses: after remote_budget_ms of failed operations every
// remote is skipped, with one warning.
TEST_F(CliRemoteHung, TheBudgetBoundsOneProcessWhenTheBreakerNeverOpens) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string why;
  auto server = test::SilentServer::start(&why);
  ASSERT_NE(server, nullptr) << why;
  write_kernels(6, "budget");
  const std::string files = " k0.cu k1.cu k2.cu k3.cu k4.cu k5.cu";
  const test::ShellRun base =
      sh("t0=$(date +%s%N); KCACHE_DIR=base \"$K\" compile" + files +
         " -j 1 --target ptx --arch sm_90 -q || exit 3; echo $(( ($(date +%s%N) - t0) / 1000000 ))");
  ASSERT_EQ(base.rc, 0) << base.err;
  const test::ShellRun run =
      sh("t0=$(date +%s%N); KCACHE_DIR=hung KCACHE_REMOTE_BREAKER_FAILURES=0 KCACHE_REMOTE_BUDGET_MS=1500 "
         "KCACHE_REMOTE='" + server->url() + "?timeout_ms=500' \"$K\" compile" + files +
         " -j 1 --target ptx --arch sm_90 -q || exit 3; echo $(( ($(date +%s%N) - t0) / 1000000 ))");
  ASSERT_EQ(run.rc, 0) << run.err;
  const long added = std::stol(run.out) - std::stol(base.out);
  std::printf("6 files in one process, breaker off, budget 1500 ms, timeout 500 ms: %ld ms added\n", added);
  // Bounded, not hung: the budget plus the operations in flight when it ran
  // out (one per remote thread) plus slack; without the budget each of the
  // 6 files costs at least 4 timeouts (12 s).
  EXPECT_LE(added, 1500 + 2 * 500 + 3000) << run.err;
  EXPECT_EQ(count_of(run.err, "remote_budget_ms"), 1) << run.err;
  const nlohmann::json r = stats("hung")["remotes"][0];
  EXPECT_GT(r["budget_skipped"].get<int>(), 0) << r.dump();
  EXPECT_EQ(r["breaker_opened"].get<int>(), 0) << r.dump();
}

class CliRemoteLeaseStall : public test::CliShell {
 protected:
  void SetUp() override {
    test::CliShell::SetUp();
    std::string why;
    m_server = test::RedisServer::start(root() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
    test::write_file(dir() / "a.cu", "extern \"C\" __global__ void stall_a(float* p) { p[threadIdx.x] += 1.0f; }\n");
  }

  // The key of a.cu (a compile with no remote, in a cache of its own).
  std::string key_of_a() {
    const test::ShellRun r = sh("KCACHE_DIR=keyonly \"$K\" compile a.cu --target ptx --arch sm_90 --json -o key.ptx");
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(r.out.substr(r.out.find('{')))["key"].get<std::string>();
  }

  std::unique_ptr<test::RedisServer> m_server;
};

// A lease key with no expiry, as a person or another tool could leave it:
// kcache never writes one, so after the ttl it is taken over (before: every
// host waited remote_lease_wait_ms, 5 min, silently).
TEST_F(CliRemoteLeaseStall, ALeaseKeyWithoutExpiryIsTakenOverAfterTheTtl) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string key = key_of_a();
  ASSERT_EQ(m_server->cli({"SET", "kcache:v1:lease:" + key, "x"}), "OK");
  const test::ShellRun r =
      sh("t0=$(date +%s%N); KCACHE_REMOTE='" + m_server->url() +
         "' KCACHE_REMOTE_LEASE_TTL_MS=1000 KCACHE_REMOTE_LEASE_WAIT_MS=600000 \"$K\" compile a.cu --target ptx "
         "--arch sm_90 --json -o a.ptx || exit 3; echo $(( ($(date +%s%N) - t0) / 1000000 ))");
  ASSERT_EQ(r.rc, 0) << r.err;
  const long ms = std::stol(r.out.substr(r.out.rfind('}') + 1));
  // Said once, after a second: the key, what the lease holds, and why.
  EXPECT_EQ(count_of(r.err, "kcache: "), 1) << r.err;
  EXPECT_NE(r.err.find(key), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("holds \"x\" with no expiry"), std::string::npos) << r.err;
  // Bounded, not hung: 1 s before looking + the 1 s ttl + the compile, far
  // below the 600 s wait.
  EXPECT_LT(ms, 30000) << r.err;
  EXPECT_EQ(test::read_file(dir() / "a.ptx"), test::read_file(dir() / "key.ptx"));
  const test::ShellRun st = sh("\"$K\" stats --json");
  const auto remote = nlohmann::json::parse(st.out)["remotes"][0];
  EXPECT_EQ(remote["lease_foreign_takeovers"].get<int>(), 1) << remote.dump();
  EXPECT_EQ(remote["lease_stalls"].get<int>(), 1) << remote.dump();
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:lease:" + key}), "0") << "released after the publish";
  EXPECT_EQ(m_server->cli({"EXISTS", "kcache:v1:" + key}), "1");
}

// A dead owner's lease (a kcache token with an expiry): the waiter says who
// holds the key and how long it may wait, then takes over once it expires.
TEST_F(CliRemoteLeaseStall, AWaiterSaysWhoHoldsTheKeyAfterASecond) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string key = key_of_a();
  ASSERT_EQ(m_server->cli({"SET", "kcache:v1:lease:" + key, "buildhost7:4242:00112233aabbccdd", "PX", "2500"}),
            "OK");
  const test::ShellRun r = sh("KCACHE_REMOTE='" + m_server->url() +
                              "' KCACHE_REMOTE_LEASE_TTL_MS=5000 \"$K\" compile a.cu --target ptx --arch sm_90 -o a.ptx");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "kcache: "), 1) << r.err;
  EXPECT_NE(r.err.find("waiting for buildhost7:4242:00112233aabbccdd compiling key " + key), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("unless its owner renews it"), std::string::npos) << r.err;
  const auto remote = nlohmann::json::parse(sh("\"$K\" stats --json").out)["remotes"][0];
  EXPECT_EQ(remote["lease_takeovers"].get<int>(), 1) << remote.dump();
  EXPECT_EQ(remote["lease_foreign_takeovers"].get<int>(), 0) << remote.dump();
}

}  // namespace
}  // namespace kcache
