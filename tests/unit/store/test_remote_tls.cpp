// rediss:// against a real redis-server with TLS (Debian's is built with it),
// its certificate made by the openssl command for the test and signed by a
// private CA: trusted through ca_file, refused without it (the system store
// does not hold the test's CA), and bounded by the deadline like plain Redis.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cache/remote_tiers.hpp"
#include "store/remote/redis_backend.hpp"
#include "store/remote/remote_store.hpp"
#include "support/misbehaving_server.hpp"
#include "support/payload.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/tls_certificates.hpp"

namespace kr = kcache::remote;
namespace fs = std::filesystem;

namespace {

class RemoteTls : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(kcache::test::make_tls_certificates(m_tmp.path() / "tls", &why)) << why;
    m_tls_port = kcache::test::free_port();
    m_server = kcache::test::RedisServer::start(m_tmp.path() / "redis", &why,
                                                kcache::test::redis_tls_arguments(m_tmp.path() / "tls", m_tls_port));
    ASSERT_NE(m_server, nullptr) << why;
  }
  std::string url() const { return "rediss://127.0.0.1:" + std::to_string(m_tls_port); }
  std::string ca() const { return (m_tmp.path() / "tls" / "ca.pem").string(); }

  kcache::test::TempDir m_tmp;
  std::unique_ptr<kcache::test::RedisServer> m_server;
  int m_tls_port = 0;
};

}  // namespace

TEST_F(RemoteTls, RoundTripOverTlsWithAPrivateCaInCaFile) {
  kr::RemoteStoreOptions o;
  o.spec = *kr::parse_remote_url(url() + "?ca_file=" + ca());
  EXPECT_TRUE(o.spec.tls);
  EXPECT_EQ(o.spec.masked(), url() + "?ca_file=" + ca());
  std::vector<std::string> warnings;
  o.warn = [&](const std::string& line) { warnings.push_back(line); };
  auto store = std::move(*kr::RemoteStore::open(o));
  auto who = store->describe();
  ASSERT_TRUE(who.has_value()) << who.error().message;
  EXPECT_EQ(who->rfind("redis 7", 0), 0U) << *who;
  const kcache::Artifact a = kcache::test::make_artifact(5, 5, 200 * 1024);
  auto put = store->put(a);
  ASSERT_TRUE(put.has_value()) << put.error().message;
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->has_value()) << (warnings.empty() ? "" : warnings[0]);
  EXPECT_EQ((*got)->payload, a.payload);
  EXPECT_TRUE(warnings.empty());
  // The object really went through the TLS server (the plain port sees it).
  EXPECT_EQ(m_server->cli({"EXISTS", kr::object_name(a.passport.key)}), "1");
}

TEST_F(RemoteTls, AServerSignedByAnUnknownCaIsRefused) {
  kr::RedisBackend backend(*kr::parse_remote_url(url()));
  auto who = backend.describe();
  ASSERT_FALSE(who.has_value());
  EXPECT_EQ(who.error().code, kcache::ErrorCode::io);
  EXPECT_NE(who.error().message.find("not trusted"), std::string::npos) << who.error().message;
  EXPECT_NE(who.error().message.find("ca_file"), std::string::npos) << who.error().message;
}

TEST(RemoteTlsDeadline, ATlsHandshakeWithAServerThatNeverAnswersEndsAtTheDeadline) {
  std::string why;
  auto server = kcache::test::MisbehavingServer::start("silent", &why);
  ASSERT_NE(server, nullptr) << why;
  kr::RedisBackend backend(*kr::parse_remote_url("rediss://127.0.0.1:" + std::to_string(server->port()) +
                                                 "?connect_timeout_ms=200&timeout_ms=500"));
  const auto start = std::chrono::steady_clock::now();
  auto got = backend.get("kcache:v1:x", 1024);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, kcache::ErrorCode::timeout) << got.error().message;
  // Bounded, not hung: within three times connect_timeout_ms + timeout_ms.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(3 * 700));
}

TEST(RemoteTlsSpec, CaFileIsAcceptedOnlyWhereTlsIsSpoken) {
  EXPECT_TRUE(kr::parse_remote_url("rediss://h:1?ca_file=/x.pem").has_value());
  EXPECT_TRUE(kr::parse_remote_url("rediss+cluster://h:1,h:2?ca_file=/x.pem").has_value());
  EXPECT_TRUE(kr::parse_remote_url("https://h/p?ca_file=/x.pem").has_value());
  EXPECT_FALSE(kr::parse_remote_url("redis://h:1?ca_file=/x.pem").has_value());
  EXPECT_FALSE(kr::parse_remote_url("http://h/p?ca_file=/x.pem").has_value());
  auto cluster = kr::parse_remote_url("rediss+cluster://h:1,h:2");
  ASSERT_TRUE(cluster.has_value());
  EXPECT_EQ(cluster->scheme, kr::Scheme::redis_cluster);
  EXPECT_TRUE(cluster->tls);
  EXPECT_EQ(cluster->masked(), "rediss+cluster://h:1,h:2");
}

// remote_ca_file (KCACHE_REMOTE_CA_FILE) gives every TLS remote without a
// ca_file of its own the CA to trust; a plain remote is left alone.
TEST_F(RemoteTls, RemoteCaFileIsTheCaOfEveryTlsRemoteWithoutItsOwn) {
  kcache::Config config;
  config.remote_ca_file = ca();
  auto spec = kcache::configured_remote_spec(config, url());
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->ca_file, ca());
  kr::RedisBackend backend(*spec);
  auto who = backend.describe();
  ASSERT_TRUE(who.has_value()) << who.error().message;
  EXPECT_EQ(kcache::configured_remote_spec(config, url() + "?ca_file=/own.pem")->ca_file, "/own.pem");
  EXPECT_EQ(kcache::configured_remote_spec(config, m_server->url())->ca_file, "");
}
