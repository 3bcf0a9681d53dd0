// RemoteStore over HTTP (libcurl) against a real nginx with its WebDAV module
// on 127.0.0.1 and a free port: round trip, credentials, poisoned and
// oversized objects, a hung server.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "store/remote/remote_store.hpp"
#include "support/files.hpp"
#include "support/nginx_server.hpp"
#include "support/payload.hpp"
#include "support/temp_dir.hpp"

namespace kr = kcache::remote;
using kcache::Artifact;
using kcache::PutOutcome;
using kcache::test::NginxServer;
using kcache::test::TempDir;

namespace {

bool required() {
  const char* v = std::getenv("KCACHE_REQUIRE_TOOLKIT");
  return v != nullptr && std::string(v) == "1";
}

#define KCACHE_START_NGINX(server, dir, token)                                    \
  std::string why_;                                                               \
  auto server = NginxServer::start(dir, &why_, token);                            \
  if (server == nullptr) {                                                        \
    if (!kcache::test::nginx_installed() && !required()) {                        \
      GTEST_SKIP() << why_;                                                       \
    }                                                                             \
    FAIL() << why_;                                                               \
  }

std::unique_ptr<kr::RemoteStore> open(const std::string& url, std::vector<std::string>* warnings) {
  kr::RemoteStoreOptions o;
  auto spec = kr::parse_remote_url(url);
  EXPECT_TRUE(spec.has_value()) << (spec ? "" : spec.error().message);
  o.spec = *spec;
  o.codec.sign = *kr::make_team_key(std::string(32, 'h'));
  o.breaker_failures = 0;
  o.warn = [warnings](const std::string& line) { warnings->push_back(line); };
  return std::move(*kr::RemoteStore::open(o));
}

}  // namespace

TEST(RemoteHttp, RoundTripIsOneObjectPerKeyUnderThePrefix) {
  TempDir tmp;
  KCACHE_START_NGINX(server, tmp.path() / "nginx", "");
  std::vector<std::string> warnings;
  auto store = open(server->url(), &warnings);
  const Artifact a = kcache::test::make_artifact(1, 2, 300 * 1024);
  auto put = store->put(a);
  ASSERT_TRUE(put.has_value()) << put.error().message;
  EXPECT_EQ(*put, PutOutcome::stored);
  EXPECT_EQ(*store->put(a), PutOutcome::already_present);
  const auto file = server->data_dir() / "cache" / kr::object_name(a.passport.key);
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_EQ(kcache::test::read_file(file), kr::encode_object(a, [] {
              kr::CodecOptions o;
              o.sign = *kr::make_team_key(std::string(32, 'h'));
              return o;
            }()));
  auto got = store->get(a.passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, a);
  EXPECT_FALSE(store->get(kcache::test::test_key(77))->has_value());
  EXPECT_TRUE(*store->remove(a.passport.key));
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_FALSE(*store->remove(a.passport.key));
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  auto who = store->describe();
  ASSERT_TRUE(who.has_value()) << who.error().message;
  EXPECT_NE(who->find("nginx"), std::string::npos) << *who;
}

TEST(RemoteHttp, BearerTokenComesFromAFileOrTheEnvironmentAndIsNeverPrinted) {
  TempDir tmp;
  KCACHE_START_NGINX(server, tmp.path() / "nginx", "t0k3n-s3cret");
  const Artifact a = kcache::test::make_artifact(3, 3, 1000);
  std::vector<std::string> warnings;
  auto anonymous = open(server->url(), &warnings);
  EXPECT_FALSE(anonymous->put(a).has_value());
  EXPECT_FALSE(anonymous->get(a.passport.key)->has_value());
  EXPECT_EQ(anonymous->remote_stats().errors, 2U);
  const auto token = tmp.path() / "token";
  std::ofstream(token) << "t0k3n-s3cret\n";
  auto with_file = open(server->url() + "?bearer_token_file=" + token.string(), &warnings);
  ASSERT_TRUE(with_file->put(a).has_value());
  ::setenv("KCACHE_TEST_HTTP_TOKEN", "t0k3n-s3cret", 1);
  auto with_env = open(server->url() + "?bearer_token_env=KCACHE_TEST_HTTP_TOKEN", &warnings);
  EXPECT_TRUE(with_env->get(a.passport.key)->has_value());
  ::unsetenv("KCACHE_TEST_HTTP_TOKEN");
  auto unset = open(server->url() + "?bearer_token_env=KCACHE_TEST_HTTP_TOKEN", &warnings);
  EXPECT_FALSE(unset->get(a.passport.key)->has_value());
  for (const auto& w : warnings) {
    EXPECT_EQ(w.find("t0k3n"), std::string::npos) << w;
  }
  EXPECT_EQ(with_file->spec().masked().find("t0k3n"), std::string::npos);
}

TEST(RemoteHttp, PoisonedAndOversizedObjectsAreMissesAndCounted) {
  TempDir tmp;
  KCACHE_START_NGINX(server, tmp.path() / "nginx", "");
  std::vector<std::string> warnings;
  auto store = open(server->url() + "?max_entry_size=64K", &warnings);
  const auto k1 = kcache::test::test_key(11);
  const auto k2 = kcache::test::test_key(12);
  std::ofstream(server->data_dir() / "cache" / kr::object_name(k1)) << "not an object";
  std::ofstream(server->data_dir() / "cache" / kr::object_name(k2)) << std::string(std::size_t{4} << 20, 'x');
  EXPECT_FALSE(store->get(k1)->has_value());
  EXPECT_FALSE(store->get(k2)->has_value());
  const auto st = store->remote_stats();
  EXPECT_EQ(st.rejected, 2U);
  EXPECT_EQ(st.rejected_by[static_cast<std::size_t>(kr::Rejection::too_large)], 1U);
  EXPECT_LE(st.bytes_in, 13U + (64U << 10) + 1U);
  EXPECT_EQ(st.errors, 0U);
}

TEST(RemoteHttp, HungServerIsBoundedByTheTimeout) {
  TempDir tmp;
  KCACHE_START_NGINX(server, tmp.path() / "nginx", "");
  std::vector<std::string> warnings;
  auto store = open(server->url() + "?timeout_ms=300", &warnings);
  server->pause();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store->get(kcache::test::test_key(1))->has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(store->remote_stats().errors, 1U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("timeout"), std::string::npos) << warnings[0];
  server->resume();
}
