// WriteBehindStore: read-your-writes, flush and destructor publish, the byte
// bound, background failures (real ENOSPC through the fault seam), other
// processes, a SIGKILLed writer, and the single-flight lease that waits for
// the publish.
#include "kcache/write_behind_store.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kcache/cache.hpp"
#include "kcache/file_store.hpp"
#include "kcache/single_flight.hpp"
#include "support/child.hpp"
#include "support/payload.hpp"
#include "support/temp_dir.hpp"
#include "unit/store/file/file_store_test_util.hpp"
#include "util/fault.hpp"

using kcache::Artifact;
using kcache::EntryInfo;
using kcache::ErrorCode;
using kcache::FileStore;
using kcache::Key;
using kcache::PutOutcome;
using kcache::Result;
using kcache::Store;
using kcache::StoreStats;
using kcache::WriteBehindOptions;
using kcache::WriteBehindStore;
using kcache::test::make_artifact;
using kcache::test::open_store;
using kcache::test::quiet_options;
using kcache::test::TempDir;
using namespace std::chrono_literals;
namespace fault = kcache::util::fault;

namespace {

// The collaborator of the unit under test: forwards to a real store, but its
// puts wait while the gate is closed, so a test can hold the background
// thread in the middle of an inner put.
class GatedStore final : public Store {
 public:
  explicit GatedStore(std::unique_ptr<Store> inner) : m_inner(std::move(inner)) {}
  std::string_view name() const noexcept override { return "gated"; }
  Result<std::optional<Artifact>> get(const Key& key) override { return m_inner->get(key); }
  Result<PutOutcome> put(const Artifact& a) override {
    {
      std::unique_lock lock(m_mutex);
      ++m_entered;
      m_changed.notify_all();
      m_changed.wait(lock, [&] { return m_open; });
    }
    return m_inner->put(a);
  }
  Result<bool> remove(const Key& key) override { return m_inner->remove(key); }
  Result<std::vector<EntryInfo>> list() override { return m_inner->list(); }
  Result<StoreStats> stats() override { return m_inner->stats(); }

  void open() {
    std::lock_guard lock(m_mutex);
    m_open = true;
    m_changed.notify_all();
  }
  // Waits until `n` puts have reached the gate.
  void wait_entered(int n) {
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [&] { return m_entered >= n; });
  }

 private:
  std::unique_ptr<Store> m_inner;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  bool m_open = false;
  int m_entered = 0;
};

// Opens the gate when a test ends, even after a failed assertion, so the
// store's destructor (which flushes) cannot wait forever. Declare it after
// the stores.
struct OpenGateOnExit {
  GatedStore& gate;
  ~OpenGateOnExit() { gate.open(); }
};

struct FaultReset {
  ~FaultReset() { fault::reset(); }
};

bool holds_exact(FileStore& store, const Artifact& a) {
  auto got = store.get(a.passport.key);
  return got && got->has_value() && (*got)->payload == a.payload;
}

}  // namespace

TEST(WriteBehindStore, PutReturnsQueuedAndGetSeesItBeforeThePublish) {
  TempDir dir;
  auto file = open_store(quiet_options(dir.path()));
  FileStore& disk = *file;
  auto gated = std::make_unique<GatedStore>(std::move(file));
  GatedStore& gate = *gated;
  WriteBehindStore store(std::move(gated));
  OpenGateOnExit guard{gate};
  const Artifact a = make_artifact(1, 1, 4096);
  ASSERT_EQ(store.put(a).value(), PutOutcome::queued);
  gate.wait_entered(1);  // the background thread is inside the inner put, held at the gate
  // Not on disk yet, but this process reads its own write.
  EXPECT_FALSE(std::filesystem::exists(kcache::test::passport_path(dir.path(), a.passport.key)));
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, a);
  EXPECT_EQ(store.write_behind_stats().pending, 1U);
  EXPECT_EQ(store.write_behind_stats().pending_hits, 1U);
  // Shared: the queued artifact itself, twice the same object.
  auto shared = store.get_shared(a.passport.key);
  ASSERT_TRUE(shared && *shared);
  EXPECT_EQ(**shared, a);
  EXPECT_EQ(shared->get(), store.get_shared(a.passport.key)->get());
  EXPECT_EQ(store.write_behind_stats().pending_hits, 3U);
  gate.open();
  ASSERT_TRUE(store.flush().has_value());
  EXPECT_TRUE(holds_exact(disk, a));
  const auto s = store.write_behind_stats();
  EXPECT_EQ(s.queued, 1U);
  EXPECT_EQ(s.published, 1U);
  EXPECT_EQ(s.pending, 0U);
  EXPECT_EQ(s.pending_bytes, 0U);
  // Served by the inner store now.
  got = store.get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->payload, a.payload);
  auto shared_after = store.get_shared(a.passport.key);  // the inner store's, through its get_shared
  ASSERT_TRUE(shared_after && *shared_after);
  EXPECT_EQ(**shared_after, a);
  EXPECT_EQ(store.write_behind_stats().pending_hits, 3U);
}

TEST(WriteBehindStore, FlushPublishesEverythingInOrder) {
  TempDir dir;
  WriteBehindStore store(open_store(quiet_options(dir.path())));
  std::vector<Artifact> all;
  for (std::uint64_t i = 0; i < 20; ++i) {
    all.push_back(make_artifact(i, 100 + i, 1000 + i));
    ASSERT_EQ(store.put(all.back()).value(), PutOutcome::queued);
  }
  ASSERT_TRUE(store.flush().has_value());
  // A second store on the same root stands for another process.
  auto other = open_store(quiet_options(dir.path()));
  for (const auto& a : all) {
    EXPECT_TRUE(holds_exact(*other, a)) << a.passport.key.hex();
  }
  EXPECT_EQ(store.write_behind_stats().published, 20U);
  // A key put again is already present in the inner store: still a success.
  ASSERT_EQ(store.put(all[0]).value(), PutOutcome::queued);
  EXPECT_TRUE(store.flush().has_value());
  EXPECT_EQ(store.write_behind_stats().failed, 0U);
}

// With an exit time bound, the destructor drops what is still queued when the
// time is up (the item in flight finishes): the dropped items never reach the
// inner store, their callbacks hear of it, and one warning counts them.
TEST(WriteBehindStore, DestructorDropsWhatIsStillQueuedAfterTheExitTimeBound) {
  TempDir dir;
  auto gated = std::make_unique<GatedStore>(open_store(quiet_options(dir.path())));
  GatedStore& gate = *gated;  // lives as long as the store: until the destructor has joined
  std::vector<std::string> warnings;
  std::atomic<int> dropped{0};
  std::atomic<int> published{0};
  std::vector<Artifact> all;
  std::thread opener;
  {
    WriteBehindOptions o;
    o.exit_flush_timeout = 50ms;
    o.what = "uploads to the test remote";
    o.warn = [&](const std::string& line) { warnings.push_back(line); };
    WriteBehindStore store(std::move(gated), o);
    for (std::uint64_t i = 0; i < 4; ++i) {
      all.push_back(make_artifact(i, i, 1024));
      ASSERT_EQ(store.put_then(all.back(),
                               [&](const Result<PutOutcome>& r) {
                                 if (r) {
                                   ++published;
                                 } else {
                                   EXPECT_EQ(r.error().code, ErrorCode::timeout);
                                   ++dropped;
                                 }
                               })
                    .value(),
                PutOutcome::queued);
    }
    gate.wait_entered(1);  // the first is in flight, held at the gate; three wait behind it
    // The gate opens only after the destructor's time bound has passed, so
    // the three queued items are dropped and only the one in flight lands.
    opener = std::thread([&] {
      // Opened at the latest after 10 s, so a destructor that waits for
      // everything fails the assertions below instead of hanging the test.
      for (int waited_ms = 0; dropped.load() < 3 && waited_ms < 10'000; ++waited_ms) {
        std::this_thread::sleep_for(1ms);
      }
      gate.open();
    });
  }
  opener.join();
  EXPECT_EQ(published.load(), 1);
  EXPECT_EQ(dropped.load(), 3);
  auto disk = open_store(quiet_options(dir.path()));
  EXPECT_TRUE(holds_exact(*disk, all[0]));
  for (std::size_t i = 1; i < all.size(); ++i) {
    EXPECT_FALSE(holds_exact(*disk, all[i])) << i;
  }
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("uploads to the test remote: 3 still queued after 50 ms at exit, dropped"),
            std::string::npos)
      << warnings[0];
}

TEST(WriteBehindStore, DestructorFlushes) {
  TempDir dir;
  std::vector<Artifact> all;
  {
    WriteBehindStore store(open_store(quiet_options(dir.path())));
    for (std::uint64_t i = 0; i < 10; ++i) {
      all.push_back(make_artifact(i, i, 64 * 1024));
      ASSERT_EQ(store.put(all.back()).value(), PutOutcome::queued);
    }
  }
  auto reopened = open_store(quiet_options(dir.path()));
  for (const auto& a : all) {
    EXPECT_TRUE(holds_exact(*reopened, a));
  }
}

TEST(WriteBehindStore, RemoveListAndStatsSeeQueuedPuts) {
  TempDir dir;
  auto file = open_store(quiet_options(dir.path()));
  auto gated = std::make_unique<GatedStore>(std::move(file));
  GatedStore& gate = *gated;
  WriteBehindStore store(std::move(gated));
  OpenGateOnExit guard{gate};
  const Artifact a = make_artifact(7, 7, 500);
  ASSERT_EQ(store.put(a).value(), PutOutcome::queued);
  gate.wait_entered(1);
  std::atomic<bool> listed{false};
  std::thread lister([&] {
    auto entries = store.list();  // flushes first: waits for the gate
    listed = true;
    ASSERT_TRUE(entries.has_value());
    ASSERT_EQ(entries->size(), 1U);
    EXPECT_EQ((*entries)[0].key, a.passport.key);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(listed.load());
  gate.open();
  lister.join();
  EXPECT_EQ(store.stats()->puts, 1U);
  // remove() flushes too, so a queued put cannot bring the entry back after it.
  ASSERT_EQ(store.put(a).value(), PutOutcome::queued);
  EXPECT_TRUE(store.remove(a.passport.key).value());
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
}

TEST(WriteBehindStore, FullQueueMakesPutWait) {
  TempDir dir;
  auto gated = std::make_unique<GatedStore>(open_store(quiet_options(dir.path())));
  GatedStore& gate = *gated;
  WriteBehindOptions o;
  o.max_pending_bytes = 3 * 10'000;
  WriteBehindStore store(std::move(gated), o);
  OpenGateOnExit guard{gate};
  for (std::uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(store.put(make_artifact(i, i, 10'000)).value(), PutOutcome::queued);
  }
  gate.wait_entered(1);
  std::atomic<bool> returned{false};
  std::thread producer([&] {
    EXPECT_EQ(store.put(make_artifact(3, 3, 10'000)).value(), PutOutcome::queued);
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "a put over the bound must wait";
  auto s = store.write_behind_stats();
  EXPECT_EQ(s.pending, 3U);
  EXPECT_LE(s.pending_bytes, o.max_pending_bytes);
  gate.open();
  producer.join();
  ASSERT_TRUE(store.flush().has_value());
  s = store.write_behind_stats();
  EXPECT_EQ(s.published, 4U);
  EXPECT_EQ(s.backpressure_waits, 1U);
  EXPECT_GE(s.backpressure_us, 50'000U);
  EXPECT_LE(s.peak_pending_bytes, o.max_pending_bytes);
}

TEST(WriteBehindStore, AnArtifactLargerThanTheBoundIsQueuedAlone) {
  TempDir dir;
  WriteBehindOptions o;
  o.max_pending_bytes = 1000;
  WriteBehindStore store(open_store(quiet_options(dir.path())), o);
  const Artifact big = make_artifact(1, 1, 100'000);
  ASSERT_EQ(store.put(big).value(), PutOutcome::queued);  // no deadlock: the queue was empty
  ASSERT_EQ(store.put(make_artifact(2, 2, 100'000)).value(), PutOutcome::queued);
  ASSERT_TRUE(store.flush().has_value());
  EXPECT_EQ(store.write_behind_stats().published, 2U);
  EXPECT_EQ(store.write_behind_stats().peak_pending_bytes, 100'000U);
}

TEST(WriteBehindStore, AnArtifactThatDoesNotVerifyIsRefusedAtOnce) {
  TempDir dir;
  WriteBehindStore store(open_store(quiet_options(dir.path())));
  Artifact a = make_artifact(1, 1, 1000);
  std::string bytes(a.payload);
  bytes[100] ^= 1;
  a.payload = std::move(bytes);
  bool called = false;
  auto put = store.put_then(a, [&](const Result<PutOutcome>& r) {
    called = true;
    EXPECT_FALSE(r.has_value());
  });
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::corrupt);
  EXPECT_TRUE(called);
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store.write_behind_stats().rejected, 1U);
  EXPECT_EQ(store.write_behind_stats().queued, 0U);
}

// TESTING F03 through the write-behind path: every write fails with ENOSPC.
// The puts are accepted, fail in the background, are counted, warned about
// once, reported by flush(), and leave nothing on disk.
TEST(WriteBehindStore, FailedBackgroundPutsAreCountedAndWarnedOnce) {
  TempDir dir;
  FaultReset reset;
  std::vector<std::string> file_warnings;
  std::vector<std::string> warnings;
  WriteBehindOptions o;
  o.warn = [&](const std::string& line) { warnings.push_back(line); };
  WriteBehindStore store(open_store(quiet_options(dir.path(), &file_warnings)), o);
  ASSERT_TRUE(fault::configure("op=write,nth=1,count=0,err=ENOSPC"));
  std::vector<Artifact> all;
  for (std::uint64_t i = 0; i < 3; ++i) {
    all.push_back(make_artifact(i, i, 2000));
    ASSERT_EQ(store.put(all.back()).value(), PutOutcome::queued);  // the caller never sees the failure
  }
  auto flushed = store.flush();
  EXPECT_GE(fault::injected(), 1U);
  fault::reset();
  ASSERT_FALSE(flushed.has_value());
  EXPECT_EQ(flushed.error().code, ErrorCode::no_space) << flushed.error().describe();
  EXPECT_TRUE(store.flush().has_value()) << "a failure is reported by one flush only";
  const auto s = store.write_behind_stats();
  EXPECT_EQ(s.failed, 3U);
  EXPECT_EQ(s.published, 0U);
  EXPECT_EQ(s.pending, 0U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("in the background"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("No space"), std::string::npos) << warnings[0];
  EXPECT_EQ(file_warnings.size(), 1U);  // the FileStore's own degraded-mode warning
  for (const auto& a : all) {
    auto got = store.get(a.passport.key);
    ASSERT_TRUE(got.has_value());
    EXPECT_FALSE(got->has_value());  // dropped, not served from the queue forever
  }
  EXPECT_EQ(kcache::test::count_leftovers(dir.path()), 0U);
}

// The same failure under Cache::get_or_compile: the compile result is
// returned, the lease is released, and the next caller compiles again.
TEST(WriteBehindStore, CompileResultIsReturnedWhenTheBackgroundPutFails) {
  TempDir dir;
  FaultReset reset;
  std::vector<std::string> warnings;
  WriteBehindOptions o;
  o.warn = [&](const std::string& line) { warnings.push_back(line); };
  WriteBehindStore store(open_store(quiet_options(dir.path())), o);
  kcache::CacheOptions co;
  co.lock_dir = dir.path() / "v1" / "locks";
  kcache::Cache cache(store, co);
  const Artifact made = make_artifact(5, 5, 3000);
  int compiles = 0;
  auto compile = [&]() -> Result<kcache::CompileOutput> {
    ++compiles;
    return kcache::CompileOutput{made, true};
  };
  ASSERT_TRUE(fault::configure("op=write,nth=1,count=0,err=ENOSPC"));
  kcache::CacheOutcome outcome{};
  auto a = cache.get_or_compile(made.passport.key, compile, &outcome);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->payload, made.payload);
  EXPECT_EQ(outcome, kcache::CacheOutcome::compiled);
  EXPECT_FALSE(store.flush().has_value());
  fault::reset();
  EXPECT_EQ(store.write_behind_stats().failed, 1U);
  EXPECT_EQ(warnings.size(), 1U);
  // The lease was released with the failure: another holder gets the key at once.
  kcache::SingleFlight other(co.lock_dir);
  auto lease = other.acquire(made.passport.key, 1s);
  ASSERT_TRUE(lease.has_value());
  EXPECT_FALSE(lease->waited());
  lease->release();
  ASSERT_TRUE(cache.get_or_compile(made.passport.key, compile).has_value());
  EXPECT_EQ(compiles, 2);
}

// The lease of a compile is released only after the entry is on disk: a
// second SingleFlight on the same lock directory (another process, for the
// kernel's OFD locks) cannot take the key while the put is held at the gate.
TEST(WriteBehindStore, SingleFlightLeaseIsReleasedAfterThePublish) {
  TempDir dir;
  auto gated = std::make_unique<GatedStore>(open_store(quiet_options(dir.path())));
  GatedStore& gate = *gated;
  WriteBehindStore store(std::move(gated));
  kcache::CacheOptions co;
  co.lock_dir = dir.path() / "v1" / "locks";
  kcache::Cache cache(store, co);
  OpenGateOnExit guard{gate};
  const Artifact made = make_artifact(9, 9, 3000);
  int compiles = 0;
  auto compile = [&]() -> Result<kcache::CompileOutput> {
    ++compiles;
    return kcache::CompileOutput{made, true};
  };
  kcache::CacheOutcome outcome{};
  ASSERT_TRUE(cache.get_or_compile(made.passport.key, compile, &outcome).has_value());
  EXPECT_EQ(outcome, kcache::CacheOutcome::compiled);  // returned before the publish
  gate.wait_entered(1);
  kcache::SingleFlight other(co.lock_dir);
  auto blocked = other.acquire(made.passport.key, 100ms);
  ASSERT_FALSE(blocked.has_value());
  EXPECT_EQ(blocked.error().code, ErrorCode::timeout);
  // This process reads its own write without waiting for the lease.
  ASSERT_TRUE(cache.get_or_compile(made.passport.key, compile, &outcome).has_value());
  EXPECT_EQ(outcome, kcache::CacheOutcome::hit);
  gate.open();
  ASSERT_TRUE(store.flush().has_value());
  auto lease = other.acquire(made.passport.key, 1s);
  ASSERT_TRUE(lease.has_value());
  lease->release();
  auto disk = open_store(quiet_options(dir.path()));
  EXPECT_TRUE(holds_exact(*disk, made));
  EXPECT_EQ(compiles, 1);
}

// A process that queues puts and returns normally (the store is destroyed)
// has published them when it exits: the next process finds them.
TEST(WriteBehindStore, AnotherProcessSeesTheEntriesAfterTheWriterExits) {
  TempDir dir;
  const auto root = dir.path();
  const auto report = kcache::test::run_reporting_child([&root](int fd) {
    int status = 0;
    {
      kcache::FileStoreOptions fo = quiet_options(root);
      fo.fsync = kcache::FsyncPolicy::file;
      auto file = FileStore::open(fo);
      if (!file) {
        ::_exit(10);
      }
      WriteBehindStore store(std::move(*file));
      for (std::uint64_t i = 0; i < 8; ++i) {
        if (!store.put(make_artifact(i, 50 + i, 32 * 1024)).has_value()) {
          status = 11;
        }
      }
      (void)!::write(fd, "queued\n", 7);
    }  // the destructor publishes
    ::_exit(status);
  });
  ASSERT_EQ(kcache::test::describe_status(report.status), "exit 0");
  EXPECT_EQ(report.output, "queued\n");
  auto reader = open_store(quiet_options(root));
  for (std::uint64_t i = 0; i < 8; ++i) {
    EXPECT_TRUE(holds_exact(*reader, make_artifact(i, 50 + i, 32 * 1024))) << i;
  }
}

// A writer SIGKILLed with 40 puts queued and one in the middle of its inner
// put (killed before the third entry's payload rename, through the fault seam):
// the entries published before the kill are exact, the rest are simply
// missing, and verify finds nothing bad.
TEST(WriteBehindStore, KilledWithPutsQueuedLeavesAConsistentStore) {
  TempDir dir;
  const auto root = dir.path();
  constexpr std::uint64_t k_puts = 40;
  const auto report = kcache::test::run_reporting_child([&root](int fd) {
    auto file = FileStore::open(quiet_options(root));
    if (!file) {
      ::_exit(10);
    }
    // Renames per entry: payload, passport. The 5th is the third entry's payload.
    if (!fault::configure("op=rename,nth=5,action=kill")) {
      ::_exit(12);
    }
    // The gate holds the background thread until every put is queued.
    auto gated = std::make_unique<GatedStore>(std::move(*file));
    GatedStore& gate = *gated;
    WriteBehindStore store(std::move(gated));
    for (std::uint64_t i = 0; i < k_puts; ++i) {
      (void)store.put(make_artifact(i, 1000 + i, 16 * 1024));
    }
    (void)!::write(fd, "queued\n", 7);
    gate.open();
    (void)store.flush();  // killed in here, by the background thread's fifth rename
    ::_exit(13);
  });
  ASSERT_EQ(kcache::test::describe_status(report.status), "signal 9");
  EXPECT_EQ(report.output, "queued\n");
  auto store = open_store(quiet_options(root));  // sweeps the killed writer's temp files (age 0)
  std::uint64_t present = 0;
  for (std::uint64_t i = 0; i < k_puts; ++i) {
    auto got = store->get(make_artifact(i, 1000 + i, 16 * 1024).passport.key);
    ASSERT_TRUE(got.has_value());
    if (got->has_value()) {
      ++present;
      EXPECT_EQ(kcache::test::check_payload((*got)->payload), 1000 + i) << "wrong bytes for entry " << i;
    }
  }
  EXPECT_EQ(present, 2U);
  auto verified = store->verify(kcache::Repair::no);
  ASSERT_TRUE(verified.has_value());
  EXPECT_EQ(verified->entries_checked, 2U);
  EXPECT_EQ(verified->entries_bad, 0U);
  EXPECT_EQ(verified->orphans, 0U);
  EXPECT_EQ(kcache::test::count_leftovers(root), 0U);
}
