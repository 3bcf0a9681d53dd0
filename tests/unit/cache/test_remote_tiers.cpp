// The configured chain memory -> file -> remote(s) over a real redis-server:
// fills, background uploads flushed at exit, read_only, a full upload queue,
// a hung server at exit.
#include "kcache/config.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "kcache/file_store.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/write_behind_store.hpp"
#include "store/remote/remote_codec.hpp"
#include "store/remote/remote_store.hpp"
#include "support/child.hpp"
#include "support/payload.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"

using kcache::Config;
using kcache::ConfigInputs;
using kcache::test::RedisServer;
using kcache::test::TempDir;
namespace kr = kcache::remote;

namespace {

class RemoteTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    m_server = RedisServer::start(m_tmp.path() / "redis", &why);
    ASSERT_NE(m_server, nullptr) << why;
  }

  Config config(const std::string& host, const std::string& remote_suffix = {},
                std::map<std::string, std::string> extra = {}) {
    ConfigInputs in;
    in.command_line = std::move(extra);
    in.command_line["cache_dir"] = (m_tmp.path() / host).string();
    in.command_line["remote"] = m_server->url() + remote_suffix;
    in.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    auto c = Config::load_from(in);
    EXPECT_TRUE(c.has_value()) << c.error().message;
    return *c;
  }

  long long dbsize() { return std::stoll(m_server->cli({"DBSIZE"})); }

  TempDir m_tmp;
  std::unique_ptr<RedisServer> m_server;
};

}  // namespace

TEST_F(RemoteTiers, RemoteHitFillsTheLocalFileStoreAndPutsReachTheRemoteByExit) {
  const auto a = kcache::test::make_artifact(1, 1, 30000);
  {
    auto store = kcache::open_configured_store(config("hostA"));
    ASSERT_TRUE(store.has_value());
    ASSERT_TRUE((*store)->put(a).has_value());
  }  // destroyed: local publish, then the upload queue is flushed
  EXPECT_EQ(dbsize(), 1);
  {
    auto store = kcache::open_configured_store(config("hostB"));
    ASSERT_TRUE(store.has_value());
    auto got = (*store)->get(a.passport.key);
    ASSERT_TRUE(got.has_value());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ(**got, a);
  }
  // Host B's own file store now holds it (the fill), with the server gone.
  m_server->kill();
  kcache::FileStoreOptions o;
  o.root = m_tmp.path() / "hostB";
  auto file = kcache::FileStore::open(o);
  ASSERT_TRUE(file.has_value());
  auto local = (*file)->get(a.passport.key);
  ASSERT_TRUE(local.has_value() && local->has_value());
  EXPECT_EQ(**local, a);
}

TEST_F(RemoteTiers, ReadOnlyRemoteIsNeverSentAWriteThroughTheChain) {
  {
    auto store = kcache::open_configured_store(config("host", "?read_only=true"));
    ASSERT_TRUE(store.has_value());
    for (int i = 0; i < 5; ++i) {
      auto put = (*store)->put(kcache::test::make_artifact(100 + i, i, 1000));
      ASSERT_TRUE(put.has_value()) << put.error().message;
    }
  }
  EXPECT_EQ(dbsize(), 0);
  EXPECT_EQ(m_server->cli({"INFO", "commandstats"}).find("cmdstat_set"), std::string::npos);
}

TEST_F(RemoteTiers, ExitWithQueuedUploadsPublishesThemAll) {
  // A child process queues 40 puts and returns at once; its exit (store
  // destruction) publishes everything, locally and on the remote.
  const Config c = config("host", {}, {{"remote_queue_size", "64K"}});
  const pid_t pid = kcache::test::fork_child([&] {
    auto store = kcache::open_configured_store(c);
    if (!store) {
      return 2;
    }
    for (int i = 0; i < 40; ++i) {
      if (!(*store)->put(kcache::test::make_artifact(200 + i, i, 16 * 1024))) {
        return 3;
      }
    }
    return 0;
  });
  EXPECT_EQ(kcache::test::describe_status(kcache::test::wait_child(pid)), "exit 0");
  EXPECT_EQ(dbsize(), 40);
  kcache::FileStoreOptions o;
  o.root = m_tmp.path() / "host";
  auto file = kcache::FileStore::open(o);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ((*file)->list()->size(), 40U);
}

TEST_F(RemoteTiers, HungServerAtExitDelaysTheExitOnlyBoundedlyAndLosesNothingLocal) {
  const Config c = config("host", "?timeout_ms=200&connect_timeout_ms=200",
                          {{"remote_queue_size", "32K"}, {"remote_breaker_failures", "2"}});
  m_server->pause();
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = kcache::test::fork_child([&] {
    ::alarm(30);  // a hang would be a failure, not a stuck suite
    auto store = kcache::open_configured_store(c);
    if (!store) {
      return 2;
    }
    for (int i = 0; i < 20; ++i) {
      if (!(*store)->put(kcache::test::make_artifact(300 + i, i, 8 * 1024))) {
        return 3;
      }
    }
    return 0;
  });
  EXPECT_EQ(kcache::test::describe_status(kcache::test::wait_child(pid)), "exit 0");
  // The first timeout opens the breaker; the remaining uploads fail at once.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  m_server->resume();
  kcache::FileStoreOptions o;
  o.root = m_tmp.path() / "host";
  auto file = kcache::FileStore::open(o);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ((*file)->list()->size(), 20U);
}

TEST_F(RemoteTiers, FullUploadQueueMakesPutsWaitNotFail) {
  kr::RemoteStoreOptions o;
  o.spec = *kr::parse_remote_url(m_server->url());
  o.warn = [](const std::string&) {};
  auto remote = kr::RemoteStore::open(o);
  ASSERT_TRUE(remote.has_value());
  kcache::WriteBehindOptions wb;
  wb.max_pending_bytes = 20 * 1024;
  wb.warn = [](const std::string&) {};
  kcache::WriteBehindStore queue(std::move(*remote), wb);
  for (int i = 0; i < 30; ++i) {
    auto put = queue.put(kcache::test::make_artifact(400 + i, i, 8 * 1024));
    ASSERT_TRUE(put.has_value());
  }
  ASSERT_TRUE(queue.flush().has_value());
  const auto st = queue.write_behind_stats();
  EXPECT_GT(st.backpressure_waits, 0U);
  EXPECT_LE(st.peak_pending_bytes, 20U * 1024U + 8U * 1024U + 4096U);
  EXPECT_EQ(st.published, 30U);
  EXPECT_EQ(dbsize(), 30);
}
