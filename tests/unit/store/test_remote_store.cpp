// RemoteStore over a real redis-server started on 127.0.0.1 and a free port
// (TESTING R01-R03): round trips, poisoned objects, a killed, hung and
// restarted server, read_only.
#include "store/remote/remote_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "store/remote/redis_backend.hpp"
#include "support/payload.hpp"
#include "support/redis_server.hpp"
#include "support/silent_server.hpp"
#include "support/temp_dir.hpp"

namespace kr = kcache::remote;
using kcache::Artifact;
using kcache::Key;
using kcache::PutOutcome;
using kcache::test::RedisServer;
using kcache::test::TempDir;

namespace {

class RemoteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_server = RedisServer::start(m_dir.path() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
  }

  std::unique_ptr<kr::RemoteStore> open(const std::string& url, std::optional<char> key = std::nullopt,
                                        std::uint32_t breaker_failures = 3, std::uint32_t breaker_seconds = 30) {
    kr::RemoteStoreOptions o;
    o.spec = *kr::parse_remote_url(url);
    if (key) {
      o.codec.sign = *kr::make_team_key(std::string(32, *key));
    }
    o.breaker_failures = breaker_failures;
    o.breaker_seconds = breaker_seconds;
    o.warn = [this](const std::string& line) { m_warnings.push_back(line); };
    auto s = kr::RemoteStore::open(std::move(o));
    EXPECT_TRUE(s.has_value());
    return std::move(*s);
  }

  // Plants raw bytes under the object name of `key`, as someone with write
  // access to the server (but not the team key) could.
  void plant(const Key& key, const std::string& bytes) {
    kr::RedisBackend raw(*kr::parse_remote_url(m_server->url()));
    ASSERT_TRUE(raw.command({"SET", kr::object_name(key), bytes}).has_value());
  }

  long long set_calls() {
    const std::string info = m_server->cli({"INFO", "commandstats"});
    const auto at = info.find("cmdstat_set:calls=");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 18));
  }

  TempDir m_dir;
  std::unique_ptr<RedisServer> m_server;
  std::vector<std::string> m_warnings;
};

}  // namespace

TEST_F(RemoteStoreTest, RoundTripOverTcpAndUnixSocket) {
  for (const std::string& url : {m_server->url(), m_server->unix_url()}) {
    auto store = open(url, 'k');
    const Artifact a = kcache::test::make_artifact(url.size(), 3, 200 * 1024);
    auto put = store->put(a);
    ASSERT_TRUE(put.has_value()) << put.error().message;
    EXPECT_EQ(*put, PutOutcome::stored);
    EXPECT_EQ(*store->put(a), PutOutcome::already_present);
    auto got = store->get(a.passport.key);
    ASSERT_TRUE(got.has_value());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ(**got, a);
    EXPECT_FALSE(store->get(kcache::test::test_key(12345))->has_value());
    const auto st = store->remote_stats();
    EXPECT_EQ(st.hits, 1U);
    EXPECT_EQ(st.misses, 1U);
    EXPECT_EQ(st.puts, 1U);
    EXPECT_EQ(st.puts_present, 1U);
    EXPECT_GT(st.bytes_out, 0U);
    EXPECT_EQ(st.errors, 0U);
    EXPECT_TRUE(m_warnings.empty());
  }
  EXPECT_NE(m_server->cli({"EXISTS", kr::object_name(kcache::test::test_key(m_server->url().size()))}), "0");
}

TEST_F(RemoteStoreTest, PoisonedObjectsAreMissesCountedAndNotFetchedAgain) {
  auto store = open(m_server->url(), 'k');
  // A correctly signed object to replay, and objects by an attacker without the key.
  auto attacker = open(m_server->url(), 'x');
  auto no_key = open(m_server->url());
  const Artifact good = kcache::test::make_artifact(1, 1, 1000);
  kr::CodecOptions team;
  team.sign = *kr::make_team_key(std::string(32, 'k'));
  const std::string signed_good = kr::encode_object(good, team);

  struct Case {
    std::uint64_t seed;
    std::string bytes;
    kr::Rejection reason;
  };
  std::vector<Case> cases;
  auto artifact_for = [](std::uint64_t seed) { return kcache::test::make_artifact(seed, seed, 1000); };
  cases.push_back({101, kr::encode_object(artifact_for(101), kr::CodecOptions{}), kr::Rejection::unsigned_entry});
  kr::CodecOptions other;
  other.sign = *kr::make_team_key(std::string(32, 'x'));
  cases.push_back({102, kr::encode_object(artifact_for(102), other), kr::Rejection::unknown_signer});
  cases.push_back({103, std::string(300, '\x7f'), kr::Rejection::malformed});
  const std::string full = kr::encode_object(artifact_for(104), team);
  cases.push_back({104, full.substr(0, full.size() / 2), kr::Rejection::malformed});
  cases.push_back({105, signed_good, kr::Rejection::wrong_key});  // replayed under another key
  std::string flipped = kr::encode_object(artifact_for(106), team);
  flipped[200] = static_cast<char>(flipped[200] ^ 1);
  cases.push_back({106, flipped, kr::Rejection::bad_signature});
  for (const Case& c : cases) {
    plant(kcache::test::test_key(c.seed), c.bytes);
  }
  for (const Case& c : cases) {
    auto got = store->get(kcache::test::test_key(c.seed));
    ASSERT_TRUE(got.has_value());
    EXPECT_FALSE(got->has_value()) << "case " << c.seed;
  }
  auto st = store->remote_stats();
  EXPECT_EQ(st.rejected, cases.size());
  for (const Case& c : cases) {
    EXPECT_GE(st.rejected_by[static_cast<std::size_t>(c.reason)], 1U) << to_string(c.reason);
  }
  EXPECT_EQ(st.hits, 0U);
  ASSERT_EQ(m_warnings.size(), 1U);  // one warning per process
  EXPECT_NE(m_warnings[0].find("bad object"), std::string::npos);
  // Not fetched again: replace one with a valid object; this process still misses.
  const std::uint64_t bytes_before = st.bytes_in;
  plant(kcache::test::test_key(103), kr::encode_object(artifact_for(103), team));
  EXPECT_FALSE(store->get(kcache::test::test_key(103))->has_value());
  EXPECT_EQ(store->remote_stats().bytes_in, bytes_before);
  // A fresh process (store) takes the valid one.
  EXPECT_TRUE(open(m_server->url(), 'k')->get(kcache::test::test_key(103))->has_value());
}

TEST_F(RemoteStoreTest, OversizedObjectIsReadBoundedAndRefused) {
  auto store = open(m_server->url() + "?max_entry_size=64K");
  plant(kcache::test::test_key(5), std::string(std::size_t{4} << 20, 'A'));
  EXPECT_FALSE(store->get(kcache::test::test_key(5))->has_value());
  const auto st = store->remote_stats();
  EXPECT_EQ(st.rejected_by[static_cast<std::size_t>(kr::Rejection::too_large)], 1U);
  EXPECT_LE(st.bytes_in, (std::uint64_t{64} << 10) + 1);  // GETRANGE: never the whole 4 MiB
}

TEST_F(RemoteStoreTest, ReadOnlyRemoteSendsNoWrite) {
  auto store = open(m_server->url() + "?read_only=true", 'k');
  EXPECT_FALSE(store->writable());
  const long long before = set_calls();
  const Artifact a = kcache::test::make_artifact(9, 9, 100);
  auto put = store->put(a);
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, kcache::ErrorCode::read_only);
  EXPECT_FALSE(store->remove(a.passport.key).value_or(true));
  EXPECT_EQ(set_calls(), before);
  EXPECT_EQ(m_server->cli({"DBSIZE"}), "0");
  // It still reads what a writer published.
  ASSERT_TRUE(open(m_server->url(), 'k')->put(a).has_value());
  EXPECT_TRUE(store->get(a.passport.key)->has_value());
}

TEST_F(RemoteStoreTest, KilledHungAndRestartedServerDegradesToMissesThenRecovers) {
  auto store = open(m_server->url() + "?timeout_ms=300&connect_timeout_ms=300", 'k', 2, 1);
  const Artifact a = kcache::test::make_artifact(3, 3, 5000);
  ASSERT_TRUE(store->put(a).has_value());
  ASSERT_TRUE(store->get(a.passport.key)->has_value());

  // Hung (SIGSTOP): each operation is bounded by the timeout, then a miss.
  m_server->pause();
  auto start = std::chrono::steady_clock::now();
  auto got = store->get(a.passport.key);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_LT(took, std::chrono::seconds(3));  // a bound on a hang, not a performance figure
  // A failure that waited out its timeout (a hung server) opens the breaker
  // at once, though breaker_failures is 2: the next get does not touch the network.
  start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store->get(a.passport.key)->has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  auto st = store->remote_stats();
  EXPECT_EQ(st.errors, 1U);
  EXPECT_GE(st.skipped, 1U);
  EXPECT_EQ(st.breaker_opened, 1U);
  m_server->resume();

  // Killed: a miss, counted; puts fail (the write-behind queue counts them).
  m_server->kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(store->get(a.passport.key)->has_value());
  EXPECT_FALSE(store->put(kcache::test::make_artifact(4, 4, 100)).has_value());

  // Restarted (empty): after the breaker time the tier is used again.
  ASSERT_TRUE(m_server->restart());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto put = store->put(a);
  ASSERT_TRUE(put.has_value()) << put.error().message;
  EXPECT_TRUE(store->get(a.passport.key)->has_value());
  EXPECT_EQ(m_warnings.size(), 1U);  // one warning for the whole episode
}

TEST_F(RemoteStoreTest, DownAtStartIsAMissWithinTheConnectTimeout) {
  const int port = kcache::test::free_port();
  auto store = open("redis://127.0.0.1:" + std::to_string(port) + "?connect_timeout_ms=200", 'k');
  EXPECT_FALSE(store->get(kcache::test::test_key(1))->has_value());
  EXPECT_EQ(store->remote_stats().errors, 1U);
  ASSERT_EQ(m_warnings.size(), 1U);
  EXPECT_NE(m_warnings[0].find("127.0.0.1:" + std::to_string(port)), std::string::npos);
}

TEST_F(RemoteStoreTest, CredentialsAreNeverPrinted) {
  m_server->cli({"CONFIG", "SET", "requirepass", "s3cr3t-pw"});
  auto wrong = open("redis://u:wrong-pw@127.0.0.1:" + std::to_string(m_server->port()) + "?connect_timeout_ms=300");
  EXPECT_FALSE(wrong->get(kcache::test::test_key(1))->has_value());
  ASSERT_EQ(m_warnings.size(), 1U);
  EXPECT_EQ(m_warnings[0].find("wrong-pw"), std::string::npos) << m_warnings[0];
  EXPECT_NE(m_warnings[0].find("u:***@"), std::string::npos) << m_warnings[0];
  auto right = open("redis://:s3cr3t-pw@127.0.0.1:" + std::to_string(m_server->port()), 'k');
  const Artifact a = kcache::test::make_artifact(2, 2, 100);
  ASSERT_TRUE(right->put(a).has_value());
  EXPECT_TRUE(right->get(a.passport.key)->has_value());
  EXPECT_EQ(right->spec().masked().find("s3cr3t"), std::string::npos);
  auto bad = kr::parse_remote_url("redis://u:s3cr3t@h:notaport");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message.find("s3cr3t"), std::string::npos) << bad.error().message;
}

TEST(RemoteSpec, ParsesUrlsAndAttributes) {
  auto s = kr::parse_remote_url("redis://ci:p%40ss@cache.local:6380/2?read_only=true&timeout_ms=50&ttl_s=3600&"
                                "max_entry_size=16M&connect_timeout_ms=20");
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->host, "cache.local");
  EXPECT_EQ(s->port, 6380);
  EXPECT_EQ(s->db, 2);
  EXPECT_EQ(s->user, "ci");
  EXPECT_EQ(s->password, "p@ss");
  EXPECT_TRUE(s->read_only);
  EXPECT_EQ(s->timeout_ms, 50U);
  EXPECT_EQ(s->connect_timeout_ms, 20U);
  EXPECT_EQ(s->ttl_s, 3600U);
  EXPECT_EQ(s->max_entry_size, std::uint64_t{16} << 20);
  EXPECT_EQ(s->masked(), "redis://ci:***@cache.local:6380/2?read_only=true&connect_timeout_ms=20&timeout_ms=50&"
                         "max_entry_size=16777216&ttl_s=3600");
  auto u = kr::parse_remote_url("redis+unix:///run/redis.sock?db=3");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->path, "/run/redis.sock");
  EXPECT_EQ(u->db, 3);
  EXPECT_EQ(kr::parse_remote_url("redis://h")->port, 6379);
  for (const char* bad : {"h:6379", "ftp://h", "redis://h:0", "redis://h:99999", "redis://h/x", "redis://h?bogus=1",
                          "redis://h?timeout_ms=abc", "redis+unix://relative", "redis://:p@"}) {
    EXPECT_FALSE(kr::parse_remote_url(bad).has_value()) << bad;
  }
}

// A server that accepts and never answers, with the breaker off: the
// process's budget stops the remote work after remote_budget_ms of failed
// operations, with one warning; the stores of one cache directory in one
// process share that budget.
TEST(RemoteStoreBudget, ASpentBudgetSkipsEveryRemoteOfTheProcess) {
  std::string why;
  auto server = kcache::test::SilentServer::start(&why);
  ASSERT_NE(server, nullptr) << why;
  // Each get waits out its whole deadline, connect_timeout_ms + timeout_ms =
  // 400 ms: 3 of them spend a budget of 1000 ms.
  auto budget = kr::RemoteBudget::for_process("budget-test-scope", std::chrono::milliseconds(1000));
  EXPECT_EQ(kr::RemoteBudget::for_process("budget-test-scope", std::chrono::milliseconds(1)).get(), budget.get());
  std::vector<std::string> warnings;
  auto open = [&] {
    kr::RemoteStoreOptions o;
    o.spec = *kr::parse_remote_url(server->url() + "?timeout_ms=200&connect_timeout_ms=200");
    o.breaker_failures = 0;  // never opens: only the budget bounds the time
    o.budget = budget;
    o.warn = [&](const std::string& line) { warnings.push_back(line); };
    return std::move(*kr::RemoteStore::open(std::move(o)));
  };
  auto data = open();
  auto lease = open();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(data->get(kcache::test::test_key(i))->has_value());
  }
  const auto took = std::chrono::steady_clock::now() - start;
  // 3 gets of 400 ms spend it; the 7 others are skipped. A bound, not a figure.
  EXPECT_LT(took, std::chrono::milliseconds(3000));
  EXPECT_GE(data->remote_stats().errors, 3U);
  EXPECT_LE(data->remote_stats().errors, 4U);
  EXPECT_GE(data->remote_stats().skipped, 6U);
  auto taken = lease->lease_take(kcache::test::test_key(1), "t", 1000);
  ASSERT_FALSE(taken.has_value());
  EXPECT_EQ(taken.error().code, kcache::ErrorCode::busy) << "the other store shares the spent budget";
  int budget_lines = 0;
  for (const auto& w : warnings) {
    budget_lines += w.find("remote_budget_ms = 1000") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(budget_lines, 1);
}

// A Redis Cluster none of whose seeds answers: the one warning names the
// remote once (its backend's errors name it again, nested; before, the URL
// came three times).
TEST(RemoteStoreWarning, NamesTheRemoteOnce) {
  const int a = kcache::test::free_port();
  const int b = kcache::test::free_port();
  std::vector<std::string> warnings;
  kr::RemoteStoreOptions o;
  o.spec = *kr::parse_remote_url("redis+cluster://127.0.0.1:" + std::to_string(a) + ",127.0.0.1:" +
                                 std::to_string(b) + "?connect_timeout_ms=100&timeout_ms=100");
  o.warn = [&](const std::string& line) { warnings.push_back(line); };
  auto store = std::move(*kr::RemoteStore::open(std::move(o)));
  EXPECT_FALSE(store->get(kcache::test::test_key(1))->has_value());
  ASSERT_EQ(warnings.size(), 1U);
  const std::string url = store->spec().masked();
  const std::string& w = warnings[0];
  int n = 0;
  for (auto at = w.find(url.substr(0, url.find('?'))); at != std::string::npos;
       at = w.find(url.substr(0, url.find('?')), at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 1) << w;
}
