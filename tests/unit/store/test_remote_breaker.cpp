// RemoteBreaker: one circuit breaker per remote, shared by every process of a
// cache directory through v1/stats/remote-<id>; one half-open probe among
// all processes; a damaged file rebuilt; an unwritable directory falls back
// to a breaker of this process.
#include "store/remote/remote_breaker.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "support/child.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace kr = kcache::remote;
using kcache::test::TempDir;

kr::RemoteSpec spec_of(const std::string& url) { return *kr::parse_remote_url(url); }

TEST(RemoteBreaker, OneServerOneFileWhateverTheCredentialsAndAttributes) {
  const auto a = spec_of("redis://u:secret@cache.internal:6379/0?timeout_ms=100");
  const auto b = spec_of("redis://cache.internal?read_only=true");
  const auto c = spec_of("redis://cache.internal:6380");
  EXPECT_EQ(kr::RemoteBreaker::file_name(a), kr::RemoteBreaker::file_name(b));
  EXPECT_NE(kr::RemoteBreaker::file_name(a), kr::RemoteBreaker::file_name(c));
  EXPECT_EQ(kr::RemoteBreaker::server_name(a), "redis://cache.internal:6379/0");
  EXPECT_EQ(kr::RemoteBreaker::server_name(a).find("secret"), std::string::npos);
}

TEST(RemoteBreaker, AHungFailureOpensAtOnceAndOtherFailuresAfterTheCount) {
  TempDir dir;
  auto b = kr::RemoteBreaker::open(dir.path(), spec_of("redis://h:1"));
  ASSERT_TRUE(b->shared());
  kr::BreakerPolicy p;
  p.failures = 3;
  p.seconds = 30;
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::closed);
  EXPECT_FALSE(b->failed(p, false));
  EXPECT_FALSE(b->failed(p, false));
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::closed);
  EXPECT_TRUE(b->failed(p, false));  // the third in a row opens it
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  b->succeeded();
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::closed);
  EXPECT_EQ(b->state().failures, 0U);
  EXPECT_TRUE(b->failed(p, true));  // one timeout opens it
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  EXPECT_EQ(b->state().opened, 2U);
  kr::BreakerPolicy never = p;
  never.failures = 0;
  auto other = kr::RemoteBreaker::open(dir.path(), spec_of("redis://h:2"));
  EXPECT_FALSE(other->failed(never, true));
  EXPECT_EQ(other->admit(never), kr::BreakerAdmit::closed);
}

// Opened in one process, open in the next: a second process never touches a
// server the first found hung.
TEST(RemoteBreaker, StateIsSharedBetweenProcesses) {
  TempDir dir;
  const auto spec = spec_of("redis://10.0.0.1:6379");
  kr::BreakerPolicy p;
  const pid_t pid = kcache::test::fork_child([&] {
    auto b = kr::RemoteBreaker::open(dir.path(), spec);
    b->counters().add(kr::RemoteCounter::errors);
    return b->failed(p, true) ? 0 : 1;
  });
  ASSERT_EQ(kcache::test::describe_status(kcache::test::wait_child(pid)), "exit 0");
  auto b = kr::RemoteBreaker::open(dir.path(), spec);
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  EXPECT_EQ(b->counters().get(kr::RemoteCounter::errors), 1U);
  auto view = kr::RemoteBreaker::open_for_reading(dir.path() / kr::RemoteBreaker::file_name(spec));
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->server(), "redis://10.0.0.1:6379/0");
  EXPECT_EQ(view->state().opened, 1U);
}

// After the open time, 16 processes ask at once: exactly one gets the probe;
// the others skip until its result. A failed probe opens it again; a
// successful one closes it for everyone.
TEST(RemoteBreaker, OneProcessWinsTheHalfOpenProbe) {
  TempDir dir;
  const auto spec = spec_of("redis://10.0.0.2:6379");
  kr::BreakerPolicy p;
  p.seconds = 1;
  p.probe_ms = 60000;
  auto b = kr::RemoteBreaker::open(dir.path(), spec);
  ASSERT_TRUE(b->failed(p, true));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const auto go = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::vector<pid_t> kids;
  for (int i = 0; i < 16; ++i) {
    kids.push_back(kcache::test::fork_child([&] {
      auto rw = kr::RemoteBreaker::open(dir.path(), spec);
      std::this_thread::sleep_until(go);  // start together
      return rw->admit(p) == kr::BreakerAdmit::probe ? 1 : 0;
    }));
  }
  int probes = 0;
  for (pid_t k : kids) {
    const int st = kcache::test::wait_child(k);
    ASSERT_TRUE(WIFEXITED(st));
    probes += WEXITSTATUS(st);
  }
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open) << "the probe is in flight";
  EXPECT_TRUE(b->failed(p, true)) << "a failed probe opens it again";
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::probe);
  b->succeeded();
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::closed);
}

// A prober that died leaves a claim that lapses after probe_ms.
TEST(RemoteBreaker, ADeadProbersClaimLapses) {
  TempDir dir;
  kr::BreakerPolicy p;
  p.seconds = 0;
  p.probe_ms = 300;
  auto b = kr::RemoteBreaker::open(dir.path(), spec_of("redis://10.0.0.3:6379"));
  ASSERT_TRUE(b->failed(p, true));
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::probe);
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::probe);
}

TEST(RemoteBreaker, ADamagedFileIsRebuilt) {
  TempDir dir;
  const auto spec = spec_of("redis://10.0.0.4:6379");
  const auto path = dir.path() / kr::RemoteBreaker::file_name(spec);
  for (const std::string& junk : {std::string("short"), std::string(1024, 'x'), std::string(4096, '\0')}) {
    kcache::test::write_file(path, junk);
    EXPECT_EQ(kr::RemoteBreaker::open_for_reading(path), nullptr);
    auto b = kr::RemoteBreaker::open(dir.path(), spec);
    ASSERT_TRUE(b->shared());
    EXPECT_EQ(b->state().failures, 0U);
    EXPECT_EQ(std::filesystem::file_size(path), kr::RemoteBreaker::k_file_size);
    ASSERT_NE(kr::RemoteBreaker::open_for_reading(path), nullptr);
  }
}

// No file can be made (the directory is not there, or not writable): the
// breaker works in this process, shared by its stores of the same server.
TEST(RemoteBreaker, WithoutAFileTheBreakerLivesInTheProcess) {
  TempDir dir;
  kcache::test::write_file(dir.path() / "not-a-dir", "x");
  const auto spec = spec_of("redis://10.0.0.5:6379");
  auto a = kr::RemoteBreaker::open(dir.path() / "not-a-dir", spec);
  auto b = kr::RemoteBreaker::open(dir.path() / "not-a-dir", spec);
  EXPECT_FALSE(a->shared());
  EXPECT_EQ(a.get(), b.get()) << "one breaker per server in a process";
  kr::BreakerPolicy p;
  EXPECT_TRUE(a->failed(p, true));
  EXPECT_EQ(b->admit(p), kr::BreakerAdmit::open);
  auto lone = kr::RemoteBreaker::open({}, spec);
  EXPECT_NE(lone.get(), a.get());
  EXPECT_EQ(lone->admit(p), kr::BreakerAdmit::closed);
}

}  // namespace
}  // namespace kcache
