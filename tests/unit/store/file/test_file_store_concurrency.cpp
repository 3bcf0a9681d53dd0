// FileStore with many processes: TESTING.md C01-C04 and F02. Children are
// forked and use their own FileStore on the shared directory.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "file_store_test_util.hpp"
#include "support/child.hpp"
#include "support/disk_usage.hpp"
#include "support/temp_dir.hpp"

namespace kcache::test {
namespace {

// Children must not sweep each other's young temp files: real age limit.
FileStoreOptions child_options(const std::filesystem::path& root) {
  auto o = quiet_options(root);
  o.stale_temp_age = std::chrono::seconds(3600);
  return o;
}

// Sums the sizes of complete entries on disk and counts them.
std::pair<std::uint64_t, std::uint64_t> recount_disk(const std::filesystem::path& root) {
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "v1" / "entries", ec)) {
    const auto name = e.path().filename().string();
    if (e.is_regular_file() && name.size() == 69 && name.ends_with(".pass")) {
      const auto payload = e.path().parent_path() / name.substr(0, 64);
      if (std::filesystem::is_regular_file(payload)) {
        ++entries;
        bytes += e.file_size() + std::filesystem::file_size(payload);
      }
    }
  }
  return {bytes, entries};
}

// C01: N processes write the same key (each its own value) while readers read:
// every read is one writer's complete value.
TEST(FileStoreConcurrency, C01_SameKeyWritersReadersSeeOneCompleteValue) {
  TempDir dir;
  { auto s = open_store(quiet_options(dir.path())); }
  constexpr int k_writers = 4;
  constexpr int k_readers = 2;
  constexpr int k_rounds = 150;
  std::vector<pid_t> pids;
  for (int w = 0; w < k_writers; ++w) {
    pids.push_back(fork_child([&, w] {
      auto s = FileStore::open(child_options(dir.path()));
      if (!s) return 3;
      const Artifact a = make_artifact(77, 1000 + static_cast<std::uint64_t>(w), 20000 + static_cast<std::size_t>(w) * 100);
      for (int r = 0; r < k_rounds; ++r) {
        if (!(*s)->put(a)) return 4;
        if (r % 2 == 1 && !(*s)->remove(a.passport.key)) return 5;
      }
      return 0;
    }));
  }
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  for (int r = 0; r < k_readers; ++r) {
    pids.push_back(fork_child([&] {
      auto s = FileStore::open(child_options(dir.path()));
      if (!s) return 3;
      unsigned hits = 0, wrong = 0;
      for (int i = 0; i < k_rounds * 4; ++i) {
        auto got = (*s)->get(test_key(77));
        if (!got) return 6;
        if (got->has_value()) {
          auto seed = check_payload((*got)->payload);
          if (!seed || *seed < 1000 || *seed >= 1000 + k_writers) ++wrong; else ++hits;
        }
      }
      char line[64];
      const int n = std::snprintf(line, sizeof line, "%u %u\n", hits, wrong);
      return ::write(pipefd[1], line, static_cast<std::size_t>(n)) == n ? 0 : 7;
    }));
  }
  ::close(pipefd[1]);
  for (pid_t p : pids) {
    const int st = wait_child(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_status(st);
  }
  FILE* in = ::fdopen(pipefd[0], "r");
  unsigned hits = 0, wrong = 0, h = 0, w = 0;
  while (std::fscanf(in, "%u %u", &h, &w) == 2) {
    hits += h;
    wrong += w;
  }
  std::fclose(in);
  auto s = open_store(quiet_options(dir.path()));
  std::printf("[C01] ops=%d reads_hit=%u faults_injected=0 acked_but_lost=0 wrong_bytes=%u corrupt_counted=%llu\n",
              k_writers * k_rounds + k_readers * k_rounds * 4, hits, wrong,
              static_cast<unsigned long long>(s->stats()->corrupt));
  EXPECT_EQ(wrong, 0U);
  EXPECT_EQ(s->stats()->corrupt, 0U) << "racing writers never make an entry look damaged";
  EXPECT_EQ(s->verify(Repair::no)->entries_bad, 0U);
}

// C02: N processes write distinct keys: all survive.
TEST(FileStoreConcurrency, C02_DistinctKeysFromManyProcessesAllSurvive) {
  TempDir dir;
  { auto s = open_store(quiet_options(dir.path())); }
  constexpr int k_procs = 6;
  constexpr int k_keys = 60;
  std::vector<pid_t> pids;
  for (int p = 0; p < k_procs; ++p) {
    pids.push_back(fork_child([&, p] {
      auto s = FileStore::open(child_options(dir.path()));
      if (!s) return 3;
      for (int k = 0; k < k_keys; ++k) {
        const std::uint64_t seed = static_cast<std::uint64_t>(p * 1000 + k);
        auto r = (*s)->put(make_artifact(seed, seed, 1000 + static_cast<std::size_t>(k) * 37));
        if (!r || *r != PutOutcome::stored) {
          std::fprintf(stderr, "C02 put: %s\n", r ? "already_present" : r.error().describe().c_str());
          return 4;
        }
      }
      return 0;
    }));
  }
  for (pid_t p : pids) {
    const int st = wait_child(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_status(st);
  }
  auto s = open_store(quiet_options(dir.path()));
  std::uint64_t lost = 0, wrong = 0;
  for (int p = 0; p < k_procs; ++p) {
    for (int k = 0; k < k_keys; ++k) {
      const std::uint64_t seed = static_cast<std::uint64_t>(p * 1000 + k);
      auto got = s->get(test_key(seed));
      if (!got || !got->has_value()) ++lost;
      else if (check_payload((*got)->payload) != seed) ++wrong;
    }
  }
  const auto [bytes, entries] = recount_disk(dir.path());
  std::printf("[C02] ops=%d faults_injected=0 acked_but_lost=%llu wrong_bytes=%llu leftovers_after_sweep=%zu\n",
              k_procs * k_keys, static_cast<unsigned long long>(lost), static_cast<unsigned long long>(wrong),
              count_leftovers(dir.path()));
  EXPECT_EQ(lost, 0U);
  EXPECT_EQ(wrong, 0U);
  EXPECT_EQ(s->stats()->entries, entries);
  EXPECT_EQ(s->stats()->size_bytes, bytes);
  EXPECT_EQ(s->stats()->puts, static_cast<std::uint64_t>(k_procs * k_keys));
}

// C03: writers, readers and evictors under a small cap across processes: no
// wrong bytes; after quiescing the size is within the cap.
TEST(FileStoreConcurrency, C03_SmallCapHoldsAcrossProcesses) {
  TempDir dir;
  auto o = child_options(dir.path());
  o.max_size_bytes = 512 * 1024;
  { auto s = open_store(o); }
  constexpr int k_writers = 4;
  constexpr int k_puts = 150;
  std::vector<pid_t> pids;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  for (int w = 0; w < k_writers; ++w) {
    pids.push_back(fork_child([&, w] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      std::mt19937 rng(static_cast<unsigned>(w));
      for (int k = 0; k < k_puts; ++k) {
        const std::uint64_t seed = static_cast<std::uint64_t>(w * 10000 + k);
        if (!(*s)->put(make_artifact(seed, seed, 4096 + rng() % 12288))) return 4;
      }
      return 0;
    }));
  }
  for (int r = 0; r < 2; ++r) {
    pids.push_back(fork_child([&, r] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      std::mt19937 rng(static_cast<unsigned>(100 + r));
      unsigned wrong = 0;
      for (int i = 0; i < k_puts * 3; ++i) {
        const std::uint64_t seed = (rng() % k_writers) * 10000 + rng() % k_puts;
        auto got = (*s)->get(test_key(seed));
        if (got && got->has_value() && check_payload((*got)->payload) != seed) ++wrong;
        if (r == 1 && i % 50 == 0) (*s)->prune(256 * 1024);  // an evictor
      }
      char line[32];
      const int n = std::snprintf(line, sizeof line, "%u\n", wrong);
      return ::write(pipefd[1], line, static_cast<std::size_t>(n)) == n ? 0 : 7;
    }));
  }
  ::close(pipefd[1]);
  for (pid_t p : pids) {
    const int st = wait_child(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_status(st);
  }
  FILE* in = ::fdopen(pipefd[0], "r");
  unsigned wrong = 0, w = 0;
  while (std::fscanf(in, "%u", &w) == 1) wrong += w;
  std::fclose(in);
  o.stale_temp_age = std::chrono::seconds(0);
  auto s = open_store(o);
  const auto [bytes, entries] = recount_disk(dir.path());
  std::printf("[C03] ops=%d faults_injected=0 acked_but_lost=n/a(evicting) wrong_bytes=%u size=%llu cap=%llu "
              "evictions=%llu leftovers_after_sweep=%zu\n",
              k_writers * k_puts + 2 * k_puts * 3, wrong, static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(o.max_size_bytes),
              static_cast<unsigned long long>(s->stats()->evictions), count_leftovers(dir.path()));
  EXPECT_EQ(wrong, 0U);
  EXPECT_LE(bytes, o.max_size_bytes);
  EXPECT_GT(entries, 10U);
  EXPECT_EQ(s->stats()->size_bytes, bytes);
  EXPECT_EQ(s->stats()->entries, entries);
  EXPECT_EQ(s->stats()->corrupt, 0U);
}

// C05: many writers under a cap of a few dozen entries, each entry in flight a
// large share of it. Room is reserved before staging, so entries, temp files
// and metadata together never pass the cap: every look at the disk, taken with
// every writer stopped (a consistent picture), holds at most the cap.
TEST(FileStoreConcurrency, C05_WritersUnderOneCapNeverPassItOnDisk) {
  TempDir dir;
  auto o = child_options(dir.path());
  o.max_size_bytes = 512 * 1024;
  { auto s = open_store(o); }
  constexpr int k_writers = 16;
  constexpr int k_puts = 96;  // each writer alone writes 3x the cap
  std::vector<pid_t> pids;
  for (int w = 0; w < k_writers; ++w) {
    pids.push_back(fork_child([&, w] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      for (int k = 0; k < k_puts; ++k) {
        const std::uint64_t seed = static_cast<std::uint64_t>(w * 10000 + k);
        if (!(*s)->put(make_artifact(seed, seed, 16 * 1024))) return 4;
      }
      return 0;
    }));
  }
  std::uint64_t looks = 0;
  std::uint64_t peak = 0;
  std::vector<int> statuses;
  for (bool running = true; running;) {
    for (pid_t p : pids) {
      if (p > 0) ::kill(p, SIGSTOP);
    }
    running = false;
    for (pid_t& p : pids) {
      int st = 0;
      if (p > 0 && ::waitpid(p, &st, WUNTRACED) == p && !WIFSTOPPED(st)) {
        statuses.push_back(st);
        p = -1;
      }
      running = running || p > 0;
    }
    const std::uint64_t bytes = bytes_under_cap(dir.path());
    peak = std::max(peak, bytes);
    ++looks;
    EXPECT_LE(bytes, o.max_size_bytes) << "look " << looks;
    for (pid_t p : pids) {
      if (p > 0) ::kill(p, SIGCONT);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::printf("[C05] writers=%d puts=%d looks=%llu peak=%llu cap=%llu\n", k_writers, k_writers * k_puts,
              static_cast<unsigned long long>(looks), static_cast<unsigned long long>(peak),
              static_cast<unsigned long long>(o.max_size_bytes));
  for (const int st : statuses) {
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_status(st);
  }
  EXPECT_EQ(statuses.size(), static_cast<std::size_t>(k_writers));
  auto s = open_store(o);
  EXPECT_GT(s->stats()->evictions, 0U);
  EXPECT_LE(bytes_under_cap(dir.path()), o.max_size_bytes);
}

// C04: two cleanups at once while files are removed behind the cache's back:
// no crash, and the counters match a recount afterwards.
TEST(FileStoreConcurrency, C04_ConcurrentCleanupsAndExternalDeletesKeepCountersExact) {
  TempDir dir;
  auto o = child_options(dir.path());
  {
    auto s = open_store(o);
    for (std::uint64_t k = 0; k < 300; ++k) {
      ASSERT_TRUE(s->put(make_artifact(k, k, 2000)).has_value());
    }
  }
  std::vector<pid_t> pids;
  for (int c = 0; c < 2; ++c) {
    pids.push_back(fork_child([&, c] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      for (int i = 0; i < 5; ++i) {
        if (!(*s)->verify(Repair::yes)) return 4;
        if (!(*s)->prune(static_cast<std::uint64_t>(400 - c * 100 - i * 20) * 2500)) return 5;
        for (std::uint64_t k = 0; k < 20; ++k) (*s)->put(make_artifact(1000 + k, k, 2000));
      }
      return 0;
    }));
  }
  // Behind the cache's back: delete passports and payloads at random.
  std::mt19937 rng(4);
  std::uint64_t deleted = 0;
  for (int i = 0; i < 300; ++i) {
    const Key key = test_key(rng() % 300);
    std::error_code ec;
    deleted += std::filesystem::remove(rng() % 2 ? payload_path(dir.path(), key) : passport_path(dir.path(), key), ec);
  }
  for (pid_t p : pids) {
    const int st = wait_child(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << describe_status(st);
  }
  o.stale_temp_age = std::chrono::seconds(0);
  auto s = open_store(o);
  ASSERT_TRUE(s->verify(Repair::yes).has_value());
  const auto [bytes, entries] = recount_disk(dir.path());
  std::printf("[C04] ops=%d faults_injected=%llu (external deletes) acked_but_lost=n/a wrong_bytes=0 "
              "counters=%llu/%llu recount=%llu/%llu leftovers_after_sweep=%zu\n",
              2 * 5 * 22, static_cast<unsigned long long>(deleted),
              static_cast<unsigned long long>(s->stats()->entries), static_cast<unsigned long long>(s->stats()->size_bytes),
              static_cast<unsigned long long>(entries), static_cast<unsigned long long>(bytes), count_leftovers(dir.path()));
  EXPECT_EQ(s->stats()->entries, entries);
  EXPECT_EQ(s->stats()->size_bytes, bytes);
  EXPECT_EQ(count_leftovers(dir.path()), 0U);
  EXPECT_EQ(s->verify(Repair::no)->entries_bad, 0U);
}

// F02: a SIGKILL storm: writers and readers killed at random, ~150 times:
// every acknowledged key is readable and exact; no wrong bytes.
TEST(FileStoreConcurrency, F02_SigkillStormLosesNoAckedEntryAndReturnsNoWrongBytes) {
  TempDir dir;
  auto o = child_options(dir.path());
  { auto s = open_store(o); }
  int acks[2];
  ASSERT_EQ(::pipe(acks), 0);
  std::uint64_t next_seed = 1;
  auto spawn = [&](bool writer) {
    const std::uint64_t base = next_seed;
    next_seed += 100000;
    return fork_child([&, writer, base] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      std::mt19937_64 rng(base);
      for (std::uint64_t i = 0;; ++i) {
        if (writer) {
          const std::uint64_t seed = base + i;
          auto r = (*s)->put(make_artifact(seed, seed, 1000 + rng() % 60000));
          if (r) {
            char line[32];
            const int n = std::snprintf(line, sizeof line, "A %llu\n", static_cast<unsigned long long>(seed));
            if (::write(acks[1], line, static_cast<std::size_t>(n)) != n) return 8;
          }
        } else {
          const std::uint64_t seed = 1 + (rng() % (base / 100000 + 1)) * 100000 + rng() % 50;
          auto got = (*s)->get(test_key(seed));
          if (got && got->has_value() && check_payload((*got)->payload) != seed) {
            if (::write(acks[1], "W 0\n", 4) != 4) return 8;
          }
        }
      }
    });
  };
  std::vector<std::pair<pid_t, bool>> kids;
  for (int i = 0; i < 4; ++i) kids.emplace_back(spawn(i < 3), i < 3);
  std::mt19937 rng(2);
  int kills = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (kills < 150 && std::chrono::steady_clock::now() < deadline) {
    ::usleep(20000 + rng() % 40000);
    const std::size_t i = rng() % kids.size();
    ::kill(kids[i].first, SIGKILL);
    wait_child(kids[i].first);
    ++kills;
    kids[i].first = spawn(kids[i].second);
  }
  for (auto& [pid, writer] : kids) {
    ::kill(pid, SIGKILL);
    wait_child(pid);
  }
  ::close(acks[1]);
  FILE* in = ::fdopen(acks[0], "r");
  std::vector<std::uint64_t> acked;
  std::uint64_t wrong = 0;
  char kind = 0;
  unsigned long long v = 0;
  while (std::fscanf(in, " %c %llu", &kind, &v) == 2) {
    if (kind == 'A') acked.push_back(v); else ++wrong;
  }
  std::fclose(in);
  o.stale_temp_age = std::chrono::seconds(0);
  auto s = open_store(o);
  std::uint64_t lost = 0;
  for (std::uint64_t seed : acked) {
    auto got = s->get(test_key(seed));
    if (!got || !got->has_value()) ++lost;
    else if (check_payload((*got)->payload) != seed) ++wrong;
  }
  ASSERT_TRUE(s->verify(Repair::yes).has_value());
  const std::size_t leftovers = count_leftovers(dir.path());
  std::printf("[F02] ops=%zu(acked puts) faults_injected=%d(SIGKILLs) acked_but_lost=%llu wrong_bytes=%llu "
              "leftovers_after_sweep=%zu\n",
              acked.size(), kills, static_cast<unsigned long long>(lost), static_cast<unsigned long long>(wrong), leftovers);
  EXPECT_GE(kills, 100);
  EXPECT_GT(acked.size(), 100U);
  EXPECT_EQ(lost, 0U);
  EXPECT_EQ(wrong, 0U);
  EXPECT_EQ(leftovers, 0U);
  const auto [bytes, entries] = recount_disk(dir.path());
  EXPECT_EQ(s->stats()->entries, entries);
}

}  // namespace
}  // namespace kcache::test
