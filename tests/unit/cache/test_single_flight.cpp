// Single-flight leases across threads and real processes (fork, SIGKILL).
#include "kcache/single_flight.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kcache/key_builder.hpp"
#include "support/temp_dir.hpp"

using kcache::ErrorCode;
using kcache::Key;
using kcache::SingleFlight;
using namespace std::chrono_literals;

namespace {

Key key_of(const std::string& s) { return kcache::KeyBuilder("test").add("k", s).key(); }

std::size_t files_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  std::error_code ec;  // a missing directory holds nothing
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    (void)e;
    ++n;
  }
  return n;
}

// Forks a child that takes the lease of `key` under `dir`, writes one byte to
// a pipe, then sleeps until killed. Returns its pid once it holds the lease.
pid_t spawn_holder(const std::filesystem::path& dir, const Key& key) {
  int fds[2];
  if (::pipe(fds) != 0) {
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    SingleFlight flight(dir);
    auto lease = flight.acquire(key, 10s);
    if (!lease) {
      ::_exit(2);
    }
    char c = 'x';
    (void)!::write(fds[1], &c, 1);
    for (;;) {
      ::pause();
    }
  }
  ::close(fds[1]);
  char c = 0;
  const bool ok = ::read(fds[0], &c, 1) == 1;
  ::close(fds[0]);
  return ok ? pid : -1;
}

void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace

TEST(SingleFlight, TheLockDirectoryIsMadeByTheFirstAcquireThatNeedsIt) {
  kcache::test::TempDir dir;
  const auto locks = dir.path() / "v1" / "locks";
  SingleFlight flight(locks, 0750);
  EXPECT_FALSE(std::filesystem::exists(locks)) << "made by the first acquire, not by the constructor";
  for (int round = 0; round < 2; ++round) {
    auto a = flight.acquire(key_of("a"), 30s);
    ASSERT_TRUE(a.has_value()) << a.error().describe();
    struct stat st {};
    ASSERT_EQ(::stat(locks.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750U);
    auto b = flight.acquire(key_of("b"), 30s);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(files_in(locks), 2U);
    a->release();
    EXPECT_EQ(files_in(locks), 1U) << "b's lock file keeps the directory";
    b->release();
    EXPECT_EQ(files_in(locks), 0U);
    if (round == 0) {
      std::filesystem::remove(locks);  // removed behind its back: made again
    }
  }
}

TEST(SingleFlight, ThreadsHoldOneKeyOneAtATime) {
  kcache::test::TempDir dir;
  SingleFlight flight(dir.path() / "locks");
  const Key key = key_of("a");
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto lease = flight.acquire(key, 30s);
        ASSERT_TRUE(lease.has_value());
        const int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --inside;
        ++done;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(done.load(), 160);
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_EQ(files_in(dir.path() / "locks"), 0U);  // every holder removed its lock file
}

TEST(SingleFlight, DifferentKeysDoNotWaitForEachOther) {
  kcache::test::TempDir dir;
  SingleFlight flight(dir.path());
  auto a = flight.acquire(key_of("a"), 0ms);
  auto b = flight.acquire(key_of("b"), 0ms);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(a->waited());
  EXPECT_FALSE(b->waited());
}

TEST(SingleFlight, ThreadWaitTimesOutWithTimeoutError) {
  SingleFlight flight;  // threads only
  EXPECT_EQ(flight.scope(), kcache::LockScope::threads);
  auto held = flight.acquire(key_of("a"), 0ms);
  ASSERT_TRUE(held.has_value());
  std::thread other([&] {
    auto again = flight.acquire(key_of("a"), 20ms);
    ASSERT_FALSE(again.has_value());
    EXPECT_EQ(again.error().code, ErrorCode::timeout);
  });
  other.join();
  held->release();
  EXPECT_FALSE(held->held());
  auto after = flight.acquire(key_of("a"), 0ms);
  EXPECT_TRUE(after.has_value());
}

TEST(SingleFlight, AnotherProcessHoldingTheKeyMakesUsWaitThenTimeOut) {
  kcache::test::TempDir dir;
  const Key key = key_of("p");
  const pid_t holder = spawn_holder(dir.path(), key);
  ASSERT_GT(holder, 0);
  SingleFlight flight(dir.path());
  auto lease = flight.acquire(key, 50ms);
  ASSERT_FALSE(lease.has_value());
  EXPECT_EQ(lease.error().code, ErrorCode::timeout);
  EXPECT_NE(lease.error().message.find("another process"), std::string::npos);
  // The thread lock was given back: a second try is not blocked by ourselves.
  reap(holder);
  auto after = flight.acquire(key, 10s);
  ASSERT_TRUE(after.has_value()) << after.error().describe();
}

// TESTING C06 at the lock level: a holder SIGKILLed while holding the key
// releases it through the kernel; a waiter already blocked takes over.
TEST(SingleFlight, KilledHolderReleasesTheKeyToAWaitingProcess) {
  kcache::test::TempDir dir;
  const Key key = key_of("k");
  const pid_t holder = spawn_holder(dir.path(), key);
  ASSERT_GT(holder, 0);
  SingleFlight flight(dir.path());
  std::atomic<bool> got{false};
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    auto lease = flight.acquire(key, 60s);
    got = lease.has_value();
    waited = lease.has_value() && lease->waited();
  });
  std::this_thread::sleep_for(30ms);  // let the waiter block (not a timing assertion)
  EXPECT_FALSE(got.load());
  reap(holder);
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(waited.load());
  EXPECT_EQ(files_in(dir.path()), 0U);  // the taker removed the dead holder's file
}

TEST(SingleFlight, LockFileLeftByADeadHolderIsReusedAndRemoved) {
  kcache::test::TempDir dir;
  const Key key = key_of("left");
  SingleFlight flight(dir.path());
  { std::FILE* f = std::fopen(flight.lock_path(key).c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  auto lease = flight.acquire(key, 0ms);
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(std::filesystem::exists(flight.lock_path(key)));
  lease->release();
  EXPECT_FALSE(std::filesystem::exists(flight.lock_path(key)));
}

TEST(SingleFlight, SymlinkAtTheLockPathIsNotFollowed) {
  kcache::test::TempDir dir;
  const Key key = key_of("s");
  SingleFlight flight(dir.path() / "locks");
  const auto target = dir.path() / "victim";
  std::filesystem::create_directories(dir.path() / "locks");
  std::filesystem::create_symlink(target, flight.lock_path(key));
  auto lease = flight.acquire(key, 0ms);
  ASSERT_FALSE(lease.has_value());
  EXPECT_EQ(lease.error().code, ErrorCode::io);
  EXPECT_FALSE(std::filesystem::exists(target));  // nothing created through the link
}

TEST(SingleFlight, ManyProcessesTakeTurnsNeverTwoAtOnce) {
  kcache::test::TempDir dir;
  const Key key = key_of("turns");
  const auto marker = dir.path() / "inside";
  constexpr int k_procs = 6;
  std::vector<pid_t> kids;
  for (int p = 0; p < k_procs; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      SingleFlight flight(dir.path() / "locks");
      int overlaps = 0;
      for (int i = 0; i < 20; ++i) {
        auto lease = flight.acquire(key, 60s);
        if (!lease) {
          ::_exit(3);
        }
        // Create the marker exclusively: it exists only while someone holds the key.
        std::FILE* f = std::fopen(marker.c_str(), "wx");
        if (f == nullptr) {
          ++overlaps;
        } else {
          std::fclose(f);
          std::this_thread::sleep_for(200us);
          std::filesystem::remove(marker);
        }
      }
      ::_exit(overlaps == 0 ? 0 : 4);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: a lease failed, 4: two holders at once";
  }
}

TEST(SingleFlight, StopWaitingEndsAProcessWaitWithoutTakingTheKey) {
  kcache::test::TempDir dir;
  const Key key = key_of("stop");
  const pid_t holder = spawn_holder(dir.path(), key);
  ASSERT_GT(holder, 0);
  SingleFlight flight(dir.path());
  int polls = 0;
  auto lease = flight.acquire(key, 60s, [&] { return ++polls == 3; });
  ASSERT_TRUE(lease.has_value()) << lease.error().describe();
  EXPECT_FALSE(lease->held());
  EXPECT_TRUE(lease->waited());
  EXPECT_EQ(polls, 3);
  // The thread lock was not kept: another acquire in this process still only waits for the holder.
  auto again = flight.acquire(key, 20ms);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::timeout);
  reap(holder);
}
