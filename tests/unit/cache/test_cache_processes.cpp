// TESTING C05 and C06: single-flight across real processes, with a FileStore
// and real NVRTC compiles.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/write_behind_store.hpp"
#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"
#include "util/sha256.hpp"

using kcache::Cache;
using kcache::CacheOptions;
using kcache::CacheOutcome;
using kcache::CompileRequest;
using namespace std::chrono_literals;

namespace {

struct Report {
  std::string outcome;
  std::string digest;
  std::uint64_t waits = 0;
  std::uint64_t compiles = 0;
};

// How the children put: straight into the FileStore, or through a
// WriteBehindStore (the default configuration) over a slow disk, whose
// background thread releases the single-flight lease after the publish.
enum class Puts { sync, write_behind };

// A disk that takes 300 ms to publish: it forwards to the real FileStore after
// a sleep, so the window between "compiled" and "published" is wide enough
// that a lease released before the publish would let waiters miss and
// compile again (the bug these tests guard against with write-behind).
class SlowDisk final : public kcache::Store {
 public:
  explicit SlowDisk(std::unique_ptr<kcache::Store> inner) : m_inner(std::move(inner)) {}
  std::string_view name() const noexcept override { return "slow-file"; }
  kcache::Result<std::optional<kcache::Artifact>> get(const kcache::Key& key) override { return m_inner->get(key); }
  kcache::Result<kcache::PutOutcome> put(const kcache::Artifact& a) override {
    std::this_thread::sleep_for(300ms);
    return m_inner->put(a);
  }
  kcache::Result<bool> remove(const kcache::Key& key) override { return m_inner->remove(key); }
  kcache::Result<std::vector<kcache::EntryInfo>> list() override { return m_inner->list(); }
  kcache::Result<kcache::StoreStats> stats() override { return m_inner->stats(); }

 private:
  std::unique_ptr<kcache::Store> m_inner;
};

// In a child: opens the store at `root`, runs get_or_compile, destroys the
// cache and the store (a write-behind store publishes then), writes one
// report line to `fd` and exits. `compile` overrides the compile function.
[[noreturn]] void child_get(const std::filesystem::path& root, const CompileRequest& request, int fd, Puts puts,
                            kcache::CompileFunction compile = {}) {
  kcache::Toolkit::instance().set_memo_dir(root / "memo");
  std::string line;
  {
    kcache::FileStoreOptions fo;
    fo.root = root;
    auto file = kcache::FileStore::open(fo);
    if (!file) {
      ::_exit(10);
    }
    std::unique_ptr<kcache::Store> store = std::move(*file);
    if (puts == Puts::write_behind) {
      store = std::make_unique<kcache::WriteBehindStore>(std::make_unique<SlowDisk>(std::move(store)));
    }
    CacheOptions co;
    co.lock_dir = root / "v1" / "locks";
    co.lock_timeout = 120s;
    co.compile = std::move(compile);
    Cache cache(*store, co);
    CacheOutcome outcome{};
    auto a = cache.get_or_compile(request, &outcome);
    if (!a) {
      std::fprintf(stderr, "child: %s\n", a.error().describe().c_str());
      ::_exit(11);
    }
    const auto s = cache.stats();
    line = std::string(kcache::to_string(outcome)) + " " + kcache::util::sha256_hex(a->payload) + " " +
           std::to_string(s.waits) + " " + std::to_string(s.compiles) + "\n";
  }
  (void)!::write(fd, line.data(), line.size());
  ::_exit(0);
}

std::vector<Report> parse_reports(const std::string& text) {
  std::vector<Report> out;
  std::istringstream in(text);
  Report r;
  while (in >> r.outcome >> r.digest >> r.waits >> r.compiles) {
    out.push_back(r);
  }
  return out;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

int wait_ok(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class CacheProcesses : public ::testing::TestWithParam<Puts> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Puts, CacheProcesses, ::testing::Values(Puts::sync, Puts::write_behind),
                         [](const ::testing::TestParamInfo<Puts>& param) {
                           return param.param == Puts::sync ? std::string("sync") : std::string("write_behind");
                         });

// C05: 16 processes ask for one cold key at once: exactly one compile, 16
// identical results. With write-behind the holder returns before its entry is
// on disk; its lease is released after the publish, so no waiter compiles.
TEST_P(CacheProcesses, SixteenProcessesOnOneColdKeyCompileOnce) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  const auto request = kcache::test::slow_request(GetParam() == Puts::sync ? "c05" : "c05wb");
  int results[2];
  int start[2];
  ASSERT_EQ(::pipe(results), 0);
  ASSERT_EQ(::pipe(start), 0);
  constexpr int k_procs = 16;
  std::vector<pid_t> kids;
  for (int i = 0; i < k_procs; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(results[0]);
      ::close(start[1]);
      char c = 0;
      (void)!::read(start[0], &c, 1);  // released all at once when the parent closes the pipe
      child_get(dir.path(), request, results[1], GetParam());
    }
    kids.push_back(pid);
  }
  ::close(results[1]);
  ::close(start[0]);
  const auto t0 = std::chrono::steady_clock::now();
  ::close(start[1]);
  const std::string text = read_all(results[0]);
  ::close(results[0]);
  const auto wall = std::chrono::steady_clock::now() - t0;
  for (pid_t pid : kids) {
    EXPECT_EQ(wait_ok(pid), 0);
  }
  const auto reports = parse_reports(text);
  ASSERT_EQ(reports.size(), static_cast<std::size_t>(k_procs));
  std::map<std::string, int> outcomes;
  std::uint64_t compiles = 0;
  for (const auto& r : reports) {
    outcomes[r.outcome]++;
    compiles += r.compiles;
    EXPECT_EQ(r.digest, reports[0].digest);
  }
  EXPECT_EQ(compiles, 1U);
  EXPECT_EQ(outcomes["compiled"], 1);
  EXPECT_EQ(outcomes["hit"] + outcomes["hit_after_wait"], k_procs - 1);
  std::printf("[ figures  ] C05 (%s puts): %d processes, %llu compile(s), %d waited, wall %.0f ms\n",
              GetParam() == Puts::sync ? "sync" : "write-behind", k_procs,
              static_cast<unsigned long long>(compiles), outcomes["hit_after_wait"],
              std::chrono::duration<double, std::milli>(wall).count());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() / "v1" / "locks"));  // no lock file left
  // The compile duration is in the published passport, and every hit added it
  // to the store's shared "compile time saved" counter (`kcache stats`).
  kcache::FileStoreOptions fo;
  fo.root = dir.path();
  auto store = kcache::FileStore::open(fo);
  ASSERT_TRUE(store.has_value());
  auto key = kcache::derive_key(request);
  ASSERT_TRUE(key.has_value());
  auto entry = (*store)->get(key->key());
  ASSERT_TRUE(entry.has_value() && entry->has_value());
  const auto duration = (*entry)->passport.compile_duration_us;
  EXPECT_GT(duration, 0U);
  auto stats = (*store)->stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_GE(stats->compile_us_saved, duration * static_cast<std::uint64_t>(k_procs - 1));
}

// C06: the holder is SIGKILLed mid-compile; a waiting process takes over,
// compiles once, and the other waiters get its result. No deadlock.
TEST_P(CacheProcesses, HolderKilledMidCompileAWaiterTakesOver) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  const auto request = kcache::test::slow_request(GetParam() == Puts::sync ? "c06" : "c06wb");
  int signal_pipe[2];
  int results[2];
  ASSERT_EQ(::pipe(signal_pipe), 0);
  ASSERT_EQ(::pipe(results), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::close(signal_pipe[0]);
    ::close(results[0]);
    const int sig_fd = signal_pipe[1];
    child_get(dir.path(), request, results[1], GetParam(), [sig_fd](const CompileRequest& r) -> kcache::Result<kcache::CompileOutput> {
      (void)!::write(sig_fd, "c", 1);  // "I hold the key and am compiling"
      auto out = kcache::compile_in_process(r);
      for (;;) {
        ::pause();  // never publishes: killed mid-compile
      }
      return out;
    });
  }
  ::close(signal_pipe[1]);
  char c = 0;
  ASSERT_EQ(::read(signal_pipe[0], &c, 1), 1);
  ::close(signal_pipe[0]);
  constexpr int k_waiters = 3;
  std::vector<pid_t> waiters;
  for (int i = 0; i < k_waiters; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(results[0]);
      child_get(dir.path(), request, results[1], GetParam());
    }
    waiters.push_back(pid);
  }
  ::close(results[1]);
  std::this_thread::sleep_for(300ms);  // sequencing only: let the waiters block on the lease
  const auto t_kill = std::chrono::steady_clock::now();
  ::kill(holder, SIGKILL);
  EXPECT_EQ(wait_ok(holder), 128 + SIGKILL);
  const std::string text = read_all(results[0]);
  ::close(results[0]);
  const auto takeover = std::chrono::steady_clock::now() - t_kill;
  for (pid_t pid : waiters) {
    EXPECT_EQ(wait_ok(pid), 0);
  }
  const auto reports = parse_reports(text);
  ASSERT_EQ(reports.size(), static_cast<std::size_t>(k_waiters));
  int compiled = 0;
  for (const auto& r : reports) {
    EXPECT_EQ(r.digest, reports[0].digest);
    EXPECT_EQ(r.waits, 1U) << r.outcome;  // every waiter waited for the dead holder
    if (r.outcome == "compiled") {
      ++compiled;
    } else {
      EXPECT_EQ(r.outcome, "hit_after_wait");
    }
  }
  EXPECT_EQ(compiled, 1);
  std::printf("[ figures  ] C06: holder killed; %d waiters done %.0f ms after the kill (one compile included)\n",
              k_waiters, std::chrono::duration<double, std::milli>(takeover).count());
}
