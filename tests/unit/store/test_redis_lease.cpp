// RedisLease (one compile per key across hosts) over a real redis-server and
// a real Redis Cluster on 127.0.0.1: exclusive take, owner-only renew and
// release, a dead owner's lease taken over, a waiter ending on the published
// entry, a server that is down, and the lease routed to its slot's master.
#include "store/remote/redis_lease.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <chrono>
#include <thread>

#include "kcache/config.hpp"
#include "store/remote/redis_backend.hpp"
#include "store/remote/redis_cluster_backend.hpp"
#include "store/remote/remote_codec.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"

namespace kr = kcache::remote;
using kcache::Key;
using kcache::RemoteLeaseOutcome;
using kcache::test::RedisServer;
using kcache::test::TempDir;

namespace {

Key key_of(char c) { return *Key::parse(std::string(64, c)); }

std::unique_ptr<kr::RedisLease> open_lease(const std::string& url, std::uint64_t ttl_ms, std::uint64_t wait_ms) {
  kr::RemoteStoreOptions o;
  o.spec = *kr::parse_remote_url(url);
  o.warn = [](const std::string&) {};
  auto store = kr::RemoteStore::open(std::move(o));
  EXPECT_TRUE(store.has_value());
  kr::RedisLeaseOptions lo;
  lo.ttl_ms = ttl_ms;
  lo.wait_ms = wait_ms;
  return std::make_unique<kr::RedisLease>(std::move(*store), lo);
}

class RedisLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_server = RedisServer::start(m_dir.path() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
  }
  TempDir m_dir;
  std::unique_ptr<RedisServer> m_server;
};

TEST_F(RedisLeaseTest, OneOwnerPerKeyAndOnlyTheOwnerReleases) {
  auto a = open_lease(m_server->url(), 10000, 0);
  auto b = open_lease(m_server->url(), 10000, 0);
  const Key k = key_of('a');
  EXPECT_EQ(a->acquire(k, {}), RemoteLeaseOutcome::owner);
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), a->token());
  // The value names the owner: "<host>:<pid>:<random>", unique per process.
  EXPECT_NE(a->token(), b->token());
  // wait_ms = 0: b does not wait, and says so.
  EXPECT_EQ(b->acquire(k, {}), RemoteLeaseOutcome::timed_out);
  EXPECT_EQ(b->stats().timeouts, 1U);
  // Releasing a key b does not own leaves a's lease alone.
  b->release(k);
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), a->token());
  // Another key is independent.
  EXPECT_EQ(b->acquire(key_of('b'), {}), RemoteLeaseOutcome::owner);
  a->release(k);
  EXPECT_EQ(m_server->cli({"EXISTS", kr::lease_name(k)}), "0");
  EXPECT_EQ(b->acquire(k, {}), RemoteLeaseOutcome::owner);
}

TEST_F(RedisLeaseTest, AStaleOwnerCanNeitherRenewNorDeleteItsSuccessorsLease) {
  const Key k = key_of('c');
  // Someone else owns it now (the stale owner's lease expired and was taken over).
  m_server->cli({"SET", kr::lease_name(k), "successor", "PX", "60000"});
  kr::RedisBackend raw(*kr::parse_remote_url(m_server->url()));
  auto renewed = raw.lease_renew(kr::lease_name(k), "stale", 100);
  ASSERT_TRUE(renewed.has_value()) << renewed.error().describe();
  EXPECT_FALSE(*renewed);
  auto released = raw.lease_release(kr::lease_name(k), "stale");
  ASSERT_TRUE(released.has_value());
  EXPECT_FALSE(*released);
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), "successor");
  EXPECT_GT(std::stoll(m_server->cli({"PTTL", kr::lease_name(k)})), 1000);
  // The owner renews and deletes.
  EXPECT_TRUE(*raw.lease_renew(kr::lease_name(k), "successor", 120000));
  EXPECT_GT(std::stoll(m_server->cli({"PTTL", kr::lease_name(k)})), 60000);
  EXPECT_TRUE(*raw.lease_release(kr::lease_name(k), "successor"));
  EXPECT_EQ(m_server->cli({"EXISTS", kr::lease_name(k)}), "0");
}

TEST_F(RedisLeaseTest, TheHeartbeatKeepsALeaseAliveWhileItIsHeld) {
  auto a = open_lease(m_server->url(), 600, 0);
  const Key k = key_of('d');
  ASSERT_EQ(a->acquire(k, {}), RemoteLeaseOutcome::owner);
  // Sequencing only: several ttls pass; the heartbeat (every ttl/3) renews.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), a->token());
  EXPECT_GE(a->stats().renewals, 1U);
  a->release(k);
  EXPECT_EQ(m_server->cli({"EXISTS", kr::lease_name(k)}), "0");
}

TEST_F(RedisLeaseTest, ADeadOwnersLeaseExpiresAndAWaiterTakesOver) {
  const Key k = key_of('e');
  // An owner that died: its lease is never renewed nor released.
  m_server->cli({"SET", kr::lease_name(k), "dead-host:1:00", "PX", "300"});
  auto b = open_lease(m_server->url(), 10000, 60000);
  int peeks = 0;
  EXPECT_EQ(b->acquire(k, [&] { ++peeks; return false; }), RemoteLeaseOutcome::owner);
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), b->token());
  const auto s = b->stats();
  EXPECT_EQ(s.waits, 1U);
  EXPECT_EQ(s.takeovers, 1U);
  EXPECT_EQ(s.timeouts, 0U);
  EXPECT_EQ(peeks, 1) << "a waiter that takes over looks for the entry once more";
}

TEST_F(RedisLeaseTest, AWaiterEndsOnTheOwnersPublishedEntry) {
  const Key k = key_of('f');
  auto owner = open_lease(m_server->url(), 10000, 0);
  ASSERT_EQ(owner->acquire(k, {}), RemoteLeaseOutcome::owner);
  auto waiter = open_lease(m_server->url(), 10000, 60000);
  std::atomic<bool> published{false};
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // sequencing only
    m_server->cli({"SET", kr::object_name(k), "the-entry"});
    published = true;
  });
  int peeks = 0;
  const auto r = waiter->acquire(k, [&] {
    ++peeks;
    return m_server->cli({"GET", kr::object_name(k)}) == "the-entry";
  });
  publisher.join();
  EXPECT_EQ(r, RemoteLeaseOutcome::published);
  EXPECT_TRUE(published.load());
  EXPECT_EQ(peeks, 1) << "the waiter peeks only once EXISTS sees the entry";
  EXPECT_EQ(waiter->stats().waited_hits, 1U);
  // The owner still holds its lease (it releases after its own publish).
  EXPECT_EQ(m_server->cli({"GET", kr::lease_name(k)}), owner->token());
}

TEST_F(RedisLeaseTest, AnEntryPublishedJustBeforeTheLeaseIsTakenIsAHitNotASecondCompile) {
  // Another host published and released between our last look and our SET.
  const Key k = key_of('h');
  m_server->cli({"SET", kr::object_name(k), "the-entry"});
  auto late = open_lease(m_server->url(), 10000, 60000);
  int peeks = 0;
  EXPECT_EQ(late->acquire(k, [&] { return ++peeks > 0; }), RemoteLeaseOutcome::published);
  EXPECT_EQ(peeks, 1);
  EXPECT_EQ(m_server->cli({"EXISTS", kr::lease_name(k)}), "0") << "the lease was given back at once";
  // With nothing published, the lease is kept and nothing is peeked.
  const Key cold = key_of('i');
  peeks = 0;
  EXPECT_EQ(late->acquire(cold, [&] { return ++peeks > 0; }), RemoteLeaseOutcome::owner);
  EXPECT_EQ(peeks, 0);
  late->release(cold);
}

TEST_F(RedisLeaseTest, AServerThatIsDownMakesTheLeaseUnavailableNotAWait) {
  const std::string url = m_server->url() + "?connect_timeout_ms=200&timeout_ms=200";
  m_server->kill();
  auto a = open_lease(url, 10000, 600000);
  EXPECT_EQ(a->acquire(key_of('g'), {}), RemoteLeaseOutcome::unavailable);
  EXPECT_EQ(a->stats().errors, 1U);
  EXPECT_EQ(a->stats().waits, 0U);
}

TEST(RedisLeaseConfig, OnlyAWritableRedisRemoteGivesALease) {
  kcache::Config c;
  c.remote = {"http://127.0.0.1:1/cache"};
  EXPECT_EQ(kcache::open_configured_lease(c), nullptr) << "HTTP remotes have no lease";
  c.remote = {"redis://127.0.0.1:1?read_only=true"};
  EXPECT_EQ(kcache::open_configured_lease(c), nullptr) << "a reader never publishes, so it takes no lease";
  c.remote = {"http://127.0.0.1:1/cache", "redis://127.0.0.1:1"};
  EXPECT_NE(kcache::open_configured_lease(c), nullptr);
  c.remote_lease_ttl_ms = 0;
  EXPECT_EQ(kcache::open_configured_lease(c), nullptr);
  c.remote_lease_ttl_ms = 10000;
  c.disable = true;
  EXPECT_EQ(kcache::open_configured_lease(c), nullptr);
}

TEST(RedisLeaseCluster, TheLeaseLivesOnTheMasterOfItsOwnSlot) {
  TempDir dir;
  std::string why;
  auto cluster = kcache::test::RedisCluster::start(dir.path() / "cluster", &why);
  ASSERT_NE(cluster, nullptr) << why;
  auto a = open_lease(cluster->url(), 10000, 0);
  auto b = open_lease(cluster->url(), 10000, 0);
  auto routing = *kr::RedisClusterBackend::open(*kr::parse_remote_url(cluster->url()));
  // Keys whose leases fall on different masters.
  int on_distinct_masters = 0;
  std::set<int> masters;
  for (char c : std::string("0123456789abcdef")) {
    const Key k = key_of(c);
    ASSERT_EQ(a->acquire(k, {}), RemoteLeaseOutcome::owner) << c;
    const int port = routing->master_of(kr::cluster_key_slot(kr::lease_name(k))).port;
    ASSERT_NE(port, 0);
    masters.insert(port);
    EXPECT_EQ(cluster->node_on(port)->cli({"GET", kr::lease_name(k)}), a->token()) << c;
    EXPECT_EQ(b->acquire(k, {}), RemoteLeaseOutcome::timed_out) << c;
    a->release(k);
    EXPECT_EQ(cluster->node_on(port)->cli({"EXISTS", kr::lease_name(k)}), "0") << c;
    EXPECT_EQ(b->acquire(k, {}), RemoteLeaseOutcome::owner) << c;
    b->release(k);
    ++on_distinct_masters;
  }
  EXPECT_EQ(on_distinct_masters, 16);
  EXPECT_EQ(masters.size(), 3U) << "16 keys spread over the 3 masters";
}

}  // namespace
