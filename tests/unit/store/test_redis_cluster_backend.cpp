// The Redis Cluster backend: CRC16 key slots against the specification and a
// real server, and routing over a real cluster of 3 masters and 3 replicas
// (redis-server --cluster-enabled yes, redis-cli --cluster create) on
// 127.0.0.1: keys over all masters, a slot migrated under a live client (ASK,
// then MOVED), a master SIGKILLed and replaced by its replica (automatically,
// and by CLUSTER FAILOVER TAKEOVER while an operation waits), a broken
// connection to a live master.
#include "store/remote/redis_cluster_backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "store/remote/remote_store.hpp"
#include "support/payload.hpp"
#include "support/redis_cluster.hpp"
#include "support/temp_dir.hpp"

namespace kr = kcache::remote;
using kcache::ErrorCode;
using kcache::test::RedisCluster;
using kcache::test::TempDir;

TEST(ClusterSlots, Crc16IsXmodemAsTheSpecificationSays) {
  // The check value of CRC-16/XMODEM, quoted in the Redis Cluster specification.
  EXPECT_EQ(kr::crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(kr::crc16_xmodem(""), 0);
  EXPECT_EQ(kr::crc16_xmodem(std::string_view("\0", 1)), 0);
  EXPECT_EQ(kr::crc16_xmodem("A"), 0x58E5);
}

TEST(ClusterSlots, HashTagsFollowTheSpecification) {
  EXPECT_EQ(kr::cluster_key_slot("123456789"), 0x31C3 % 16384);
  // The examples of the specification's "Hash tags" section.
  EXPECT_EQ(kr::cluster_key_slot("{user1000}.following"), kr::cluster_key_slot("user1000"));
  EXPECT_EQ(kr::cluster_key_slot("{user1000}.followers"), kr::cluster_key_slot("user1000"));
  EXPECT_EQ(kr::cluster_key_slot("foo{}{bar}"), kr::crc16_xmodem("foo{}{bar}") % 16384);
  EXPECT_EQ(kr::cluster_key_slot("foo{{bar}}zap"), kr::cluster_key_slot("{bar"));
  EXPECT_EQ(kr::cluster_key_slot("foo{bar}{zap}"), kr::cluster_key_slot("bar"));
  EXPECT_EQ(kr::cluster_key_slot("{unclosed"), kr::crc16_xmodem("{unclosed") % 16384);
  EXPECT_NE(kr::cluster_key_slot("foo{}{bar}"), kr::cluster_key_slot("bar"));
}

TEST(ClusterSlots, SeedListsParse) {
  auto seeds = kr::parse_cluster_seeds("a:7000,b,[::1]:7002");
  ASSERT_TRUE(seeds.has_value()) << seeds.error().message;
  ASSERT_EQ(seeds->size(), 3U);
  EXPECT_EQ((*seeds)[0].address(), "a:7000");
  EXPECT_EQ((*seeds)[1].address(), "b:6379");
  EXPECT_EQ((*seeds)[2].address(), "::1:7002");
  auto bad = kr::parse_cluster_seeds("a:7000,b:x");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(bad.error().message.find("b:x"), std::string::npos) << bad.error().message;
  auto backend = kr::make_backend(*kr::parse_remote_url("redis+cluster://a:1,:2"));
  ASSERT_FALSE(backend.has_value());
  EXPECT_EQ(backend.error().code, ErrorCode::invalid_argument);
}

namespace {

class ClusterBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_cluster = RedisCluster::start(m_dir.path() / "cluster", &why);
    ASSERT_NE(m_cluster, nullptr) << why;
  }

  std::unique_ptr<kr::RedisClusterBackend> open(const std::string& attrs = "?connect_timeout_ms=300&timeout_ms=1000") {
    auto b = kr::RedisClusterBackend::open(*kr::parse_remote_url(m_cluster->url() + attrs));
    EXPECT_TRUE(b.has_value());
    return std::move(*b);
  }

  static std::string value_of(int i) { return "value-" + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'x'); }

  TempDir m_dir;
  std::unique_ptr<RedisCluster> m_cluster;
};

}  // namespace

TEST_F(ClusterBackendTest, SlotsMatchTheServerAndManyKeysRoundTripOverAllMasters) {
  // The server's CLUSTER KEYSLOT agrees with ours, hash tags included.
  for (const std::string key : {"123456789", "foo", "kcache:v1:00ff", "{user1000}.following", "foo{}{bar}",
                                "foo{{bar}}zap", "foo{bar}{zap}", "{unclosed", "a{b}c{d}"}) {
    EXPECT_EQ(m_cluster->node(0).cli({"CLUSTER", "KEYSLOT", key}), std::to_string(kr::cluster_key_slot(key))) << key;
  }
  auto backend = open();
  const std::string description = *backend->describe();
  EXPECT_NE(description.find("(cluster, state ok): 3 masters"), std::string::npos) << description;
  // (CLUSTER SLOTS lists a replica only once its offset has been gossiped.)
  EXPECT_NE(description.find(" replica"), std::string::npos) << description;

  constexpr int k_keys = 300;
  for (int i = 0; i < k_keys; ++i) {
    const std::string name = "kcache:v1:test" + std::to_string(i);
    auto put = backend->put(name, value_of(i), 0);
    ASSERT_TRUE(put.has_value()) << put.error().message;
    EXPECT_TRUE(*put);
  }
  // Every master holds part of them, and they add up.
  std::set<int> masters;
  for (int slot = 0; slot < kr::k_cluster_slots; slot += 128) {
    masters.insert(backend->master_of(slot).port);
  }
  ASSERT_EQ(masters.size(), 3U);
  long long total = 0;
  for (int port : masters) {
    const long long n = std::stoll(m_cluster->node_on(port)->cli({"DBSIZE"}));
    EXPECT_GT(n, k_keys / 6) << "master " << port;
    total += n;
  }
  EXPECT_EQ(total, k_keys);
  for (int i = 0; i < k_keys; ++i) {
    const std::string name = "kcache:v1:test" + std::to_string(i);
    auto got = backend->get(name, 1 << 20);
    ASSERT_TRUE(got.has_value()) << got.error().message;
    ASSERT_TRUE(got->has_value()) << name;
    EXPECT_EQ(**got, value_of(i));
    EXPECT_FALSE(*backend->put(name, "other", 0));  // NX: the first write stays
  }
  EXPECT_FALSE(backend->get("kcache:v1:absent", 100)->has_value());
  EXPECT_TRUE(*backend->remove("kcache:v1:test7"));
  EXPECT_FALSE(*backend->remove("kcache:v1:test7"));
  EXPECT_FALSE(backend->get("kcache:v1:test7", 100)->has_value());
  // No redirect with a fresh map: every command went to the right master.
  EXPECT_EQ(backend->routing_stats().moved, 0U);
  EXPECT_EQ(backend->routing_stats().ask, 0U);

  // The whole tier through make_backend: an artifact round trip.
  kr::RemoteStoreOptions o;
  o.spec = *kr::parse_remote_url(m_cluster->url());
  auto store = kr::RemoteStore::open(std::move(o));
  ASSERT_TRUE(store.has_value()) << store.error().message;
  const kcache::Artifact a = kcache::test::make_artifact(1, 2, 64 * 1024);
  ASSERT_EQ(*(*store)->put(a), kcache::PutOutcome::stored);
  auto got = (*store)->get(a.passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, a);
}

TEST_F(ClusterBackendTest, FollowsAskWhileASlotMigratesAndMovedAfterwards) {
  auto backend = open();
  const std::string k1 = "{mig}kcache:v1:one";
  const std::string k2 = "{mig}kcache:v1:two";
  const int slot = kr::cluster_key_slot(k1);
  ASSERT_EQ(slot, kr::cluster_key_slot(k2));
  ASSERT_TRUE(*backend->put(k1, "first object", 0));
  const kr::ClusterNode source = backend->master_of(slot);
  kr::ClusterNode target;
  for (int s = 0; s < kr::k_cluster_slots && target.port == 0; s += 64) {
    if (backend->master_of(s).port != source.port) {
      target = backend->master_of(s);
    }
  }
  ASSERT_NE(target.port, 0);
  auto& src = *m_cluster->node_on(source.port);
  auto& dst = *m_cluster->node_on(target.port);
  const std::string src_id = m_cluster->id_of(source.port);
  const std::string dst_id = m_cluster->id_of(target.port);
  const std::string s = std::to_string(slot);
  // Start migrating the slot and move k1 to the target: the source now
  // answers ASK for it.
  ASSERT_EQ(dst.cli({"CLUSTER", "SETSLOT", s, "IMPORTING", src_id}), "OK");
  ASSERT_EQ(src.cli({"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id}), "OK");
  ASSERT_EQ(src.cli({"MIGRATE", "127.0.0.1", std::to_string(target.port), k1, "0", "5000"}), "OK");
  auto got = backend->get(k1, 100);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "first object");
  EXPECT_GE(backend->routing_stats().ask, 1U);
  // A new object of the migrating slot is written on the target (ASK + ASKING).
  ASSERT_TRUE(*backend->put(k2, "second object", 0));
  EXPECT_EQ(dst.cli({"CLUSTER", "COUNTKEYSINSLOT", s}), "2");
  EXPECT_EQ(src.cli({"CLUSTER", "COUNTKEYSINSLOT", s}), "0");
  // ASK does not change the map.
  EXPECT_EQ(backend->master_of(slot).port, source.port);
  EXPECT_EQ(backend->routing_stats().moved, 0U);
  // Finish the migration: the client's map is now stale, the source answers
  // MOVED, the client follows it and then reloads the map.
  for (std::size_t i = 0; i < m_cluster->size(); ++i) {
    m_cluster->node(i).cli({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
  }
  got = backend->get(k2, 100);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "second object");
  EXPECT_GE(backend->routing_stats().moved, 1U);
  EXPECT_EQ(backend->master_of(slot).port, target.port);
  const auto refreshes = backend->routing_stats().refreshes;
  ASSERT_TRUE(backend->get(k1, 100)->has_value());
  EXPECT_EQ(backend->routing_stats().refreshes, refreshes + 1) << "the map is reloaded after a MOVED";
  EXPECT_EQ(backend->routing_stats().moved, 1U);
}

TEST_F(ClusterBackendTest, FollowsAFailoverAfterAMasterIsKilledWithoutWrongBytes) {
  auto backend = open();
  constexpr int k_keys = 60;
  for (int i = 0; i < k_keys; ++i) {
    ASSERT_TRUE(*backend->put("kcache:v1:f" + std::to_string(i), value_of(i), 0));
  }
  ASSERT_TRUE(m_cluster->wait_ok(std::chrono::seconds(10)));  // replicas hold every object
  const int victim_slot = kr::cluster_key_slot("kcache:v1:f0");
  const int victim = backend->master_of(victim_slot).port;
  m_cluster->node_on(victim)->kill();
  // Until the replica is promoted, operations on the dead master's slots fail
  // (io or timeout, within their bounds); never a wrong object, never a miss.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int failures = 0;
  bool all_ok = false;
  while (!all_ok && std::chrono::steady_clock::now() < deadline) {
    all_ok = true;
    for (int i = 0; i < k_keys; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto got = backend->get("kcache:v1:f" + std::to_string(i), 1 << 20);
      // Bounded: connect 300 ms + 2 x 1000 ms, plus one step in flight; far from a hang.
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
      if (!got) {
        EXPECT_TRUE(got.error().code == ErrorCode::io || got.error().code == ErrorCode::timeout)
            << got.error().message;
        ++failures;
        all_ok = false;
        continue;
      }
      ASSERT_TRUE(got->has_value()) << "object " << i << " lost";
      ASSERT_EQ(**got, value_of(i)) << "object " << i;
    }
    if (!all_ok) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ASSERT_TRUE(all_ok) << "the client did not follow the failover within 30 s";
  // The first operation on a dead slot waits for the promotion (up to its
  // deadline) instead of failing at once; those past it fail, as counted.
  EXPECT_GE(backend->routing_stats().failover_waits, 1U) << failures << " operation(s) failed";
  const int promoted = backend->master_of(victim_slot).port;
  EXPECT_NE(promoted, victim);
  EXPECT_NE(promoted, 0);
  EXPECT_GE(backend->routing_stats().refreshes, 2U);
  // The promoted replica takes writes.
  auto put = backend->put("kcache:v1:after", "written after the failover", 0);
  ASSERT_TRUE(put.has_value()) << put.error().message;
  EXPECT_TRUE(*put);
  const std::string description = *backend->describe();
  EXPECT_NE(description.find("3 masters"), std::string::npos) << description;
  EXPECT_EQ(description.find("127.0.0.1:" + std::to_string(victim) + " ["), std::string::npos) << description;
}

TEST_F(ClusterBackendTest, AnOperationOnADeadMastersSlotWaitsForItsReplicaAndSucceeds) {
  // A deadline (300 ms + 2 x 3000 ms) longer than the promotion below.
  auto backend = open("?connect_timeout_ms=300&timeout_ms=3000");
  const std::string name = "kcache:v1:takeover";
  ASSERT_TRUE(*backend->put(name, value_of(7), 0));
  ASSERT_TRUE(m_cluster->wait_ok(std::chrono::seconds(10)));  // the replica holds the object
  const int victim = backend->master_of(kr::cluster_key_slot(name)).port;
  kcache::test::RedisServer* replica = m_cluster->replica_of(victim);
  ASSERT_NE(replica, nullptr);
  m_cluster->node_on(victim)->kill();
  auto got = std::async(std::launch::async, [&] { return backend->get(name, 1 << 20); });
  // Sequencing only: the get meets the dead master before the replica takes over.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  replica->cli({"CLUSTER", "FAILOVER", "TAKEOVER"});
  const auto r = got.get();
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, value_of(7));
  EXPECT_GE(backend->routing_stats().failover_waits, 1U);
  EXPECT_EQ(backend->master_of(kr::cluster_key_slot(name)).port, replica->port());
}

// Issue 18 item 3: a data operation on a dead master's slot fails at its
// deadline (here 100 + 2 x 200 ms, shorter than the failover), while a lease
// command rides the failover out (max(ttl, 2 x cluster-node-timeout)) and
// finds the replicated lease on the promoted replica.
TEST_F(ClusterBackendTest, ALeaseCommandRidesOutAFailoverThatADataOperationDoesNot) {
  auto backend = open("?connect_timeout_ms=100&timeout_ms=200");
  const std::string lease = "kcache:v1:lease:rideout";
  auto taken = backend->lease_take(lease, "owner", 20000);
  ASSERT_TRUE(taken.has_value()) << taken.error().message;
  ASSERT_TRUE(*taken);
  ASSERT_TRUE(m_cluster->wait_ok(std::chrono::seconds(10)));  // the replica holds the lease
  const int victim = backend->master_of(kr::cluster_key_slot(lease)).port;
  m_cluster->node_on(victim)->kill();
  const auto killed = std::chrono::steady_clock::now();
  auto data = backend->get(lease, 1024);
  ASSERT_FALSE(data.has_value()) << "a data operation does not wait out a failover";
  // Bounded, not hung: three times the data deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::milliseconds(3 * 500));
  auto again = backend->lease_take(lease, "waiter", 20000);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_FALSE(*again) << "the owner's lease survived on the promoted replica";
  EXPECT_GT(std::chrono::steady_clock::now() - killed, std::chrono::milliseconds(500)) << "it waited for the vote";
  EXPECT_NE(backend->master_of(kr::cluster_key_slot(lease)).port, victim);
  auto renewed = backend->lease_renew(lease, "owner", 20000);
  ASSERT_TRUE(renewed.has_value()) << renewed.error().message;
  EXPECT_TRUE(*renewed);
  EXPECT_GE(backend->routing_stats().failover_waits, 1U);
}

TEST_F(ClusterBackendTest, ABrokenConnectionToALiveMasterIsRetriedAtOnce) {
  auto backend = open();
  const std::string name = "kcache:v1:reconnect";
  ASSERT_TRUE(*backend->put(name, value_of(3), 0));
  const int master = backend->master_of(kr::cluster_key_slot(name)).port;
  // The master closes every client connection (the pooled ones included).
  m_cluster->node_on(master)->cli({"CLIENT", "KILL", "TYPE", "normal"});
  const auto retries = backend->routing_stats().retries;
  auto got = backend->get(name, 1 << 20);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, value_of(3));
  EXPECT_EQ(backend->routing_stats().retries, retries + 1);
  EXPECT_EQ(backend->routing_stats().failover_waits, 0U) << "a live master is not waited for";
}

TEST(ClusterBackend, NoReachableNodeIsAnErrorNotAHang) {
  const int port = kcache::test::free_port();
  auto b = kr::make_backend(*kr::parse_remote_url("redis+cluster://127.0.0.1:" + std::to_string(port) +
                                                  "?connect_timeout_ms=200&timeout_ms=200"));
  ASSERT_TRUE(b.has_value());
  auto got = (*b)->get("kcache:v1:x", 10);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::io) << got.error().message;
  EXPECT_FALSE((*b)->describe().has_value());
}

TEST(ClusterBackend, AStandaloneServerIsRefusedByName) {
  TempDir dir;
  std::string why;
  auto server = kcache::test::RedisServer::start(dir.path() / "redis", &why);
  ASSERT_NE(server, nullptr) << why;
  auto b = kr::make_backend(*kr::parse_remote_url("redis+cluster://127.0.0.1:" + std::to_string(server->port())));
  ASSERT_TRUE(b.has_value());
  auto got = (*b)->get("kcache:v1:x", 10);
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.error().message.find("redis://"), std::string::npos) << got.error().message;
  EXPECT_NE(got.error().message.find("CLUSTER SLOTS"), std::string::npos) << got.error().message;
}
