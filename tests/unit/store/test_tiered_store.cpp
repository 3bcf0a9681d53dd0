#include "kcache/tiered_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kcache/key_builder.hpp"
#include "kcache/memory_store.hpp"

using kcache::Artifact;
using kcache::EntryInfo;
using kcache::Error;
using kcache::ErrorCode;
using kcache::Key;
using kcache::KeyBuilder;
using kcache::MemoryStore;
using kcache::PutOutcome;
using kcache::Result;
using kcache::Store;
using kcache::StoreStats;
using kcache::TieredStore;

namespace {

Artifact blob(const std::string& name, std::size_t size = 100) {
  return Artifact::make(KeyBuilder("test").add("name", name), "blob", std::string(size, name[0]));
}

// A fault seam: a tier whose every operation fails with EIO while `broken`
// is set, and otherwise forwards to a real MemoryStore. It stands for a disk
// or remote tier that breaks and recovers (there is no real store yet that
// fails on command; FileStore fault tests inject errors through KCACHE_FAULT).
class SwitchableTier final : public Store {
 public:
  explicit SwitchableTier(std::atomic<bool>& broken) : m_broken(broken) {}
  std::string_view name() const noexcept override { return "flaky"; }
  Result<std::optional<Artifact>> get(const Key& key) override {
    if (m_broken) return fail();
    return m_inner.get(key);
  }
  Result<PutOutcome> put(const Artifact& a) override {
    if (m_broken) return fail();
    return m_inner.put(a);
  }
  Result<bool> remove(const Key& key) override {
    if (m_broken) return fail();
    return m_inner.remove(key);
  }
  Result<std::vector<EntryInfo>> list() override {
    if (m_broken) return fail();
    return m_inner.list();
  }
  Result<StoreStats> stats() override {
    if (m_broken) return fail();
    return m_inner.stats();
  }

 private:
  static tl::unexpected<Error> fail() { return kcache::make_error(ErrorCode::io, "injected EIO"); }
  std::atomic<bool>& m_broken;
  MemoryStore m_inner{1 << 20};
};

struct Chain {
  std::atomic<bool> broken{false};
  std::vector<std::string> warnings;
  std::unique_ptr<TieredStore> store;
  MemoryStore* upper = nullptr;
};

// memory (1 MiB) in front of a switchable tier.
std::unique_ptr<Chain> make_chain() {
  auto c = std::make_unique<Chain>();
  std::vector<std::unique_ptr<Store>> tiers;
  auto upper = std::make_unique<MemoryStore>(1 << 20);
  c->upper = upper.get();
  tiers.push_back(std::move(upper));
  tiers.push_back(std::make_unique<SwitchableTier>(c->broken));
  Chain* raw = c.get();
  c->store = std::make_unique<TieredStore>(std::move(tiers),
                                           [raw](const std::string& w) { raw->warnings.push_back(w); });
  return c;
}

}  // namespace

TEST(TieredStore, LookupTraceRecordsEveryTierAskedWithItsLocationAndOutcome) {
  auto c = make_chain();
  c->store->set_tier_location(1, "redis://127.0.0.1:1");
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->tier(1).put(a));
  // Not recording: nothing is kept.
  ASSERT_TRUE(c->store->get(a.passport.key));
  EXPECT_TRUE(TieredStore::take_lookup_trace().empty());

  (void)c->store->tier(0).remove(a.passport.key);
  TieredStore::start_lookup_trace();
  ASSERT_TRUE(c->store->get(blob("absent").passport.key));  // a miss in both
  ASSERT_TRUE(c->store->get(a.passport.key));               // a hit in the lower tier
  c->broken = true;
  ASSERT_TRUE(c->store->get(blob("other").passport.key));   // upper miss, lower error
  c->broken = false;
  const auto trace = TieredStore::take_lookup_trace();
  ASSERT_EQ(trace.size(), 6U);
  using O = kcache::TierLookup::Outcome;
  const std::vector<std::pair<std::string, O>> want{{"memory", O::miss}, {"redis://127.0.0.1:1", O::miss},
                                                    {"memory", O::miss}, {"redis://127.0.0.1:1", O::hit},
                                                    {"memory", O::miss}, {"redis://127.0.0.1:1", O::error}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(trace[i].tier, want[i].first) << i;
    EXPECT_EQ(trace[i].outcome, want[i].second) << i;
  }
  // Stopped by take: later lookups are not recorded.
  ASSERT_TRUE(c->store->get(a.passport.key));
  EXPECT_TRUE(TieredStore::take_lookup_trace().empty());
}

// get_shared(): a lower tier's hit fills the memory tier, and the next
// get_shared() is the memory tier's own artifact (one object, no copy).
TEST(TieredStore, GetSharedFillsUpperTiersAndThenServesTheMemoryTiersArtifact) {
  auto c = make_chain();
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->tier(1).put(a).has_value());
  auto lower = c->store->get_shared(a.passport.key);
  ASSERT_TRUE(lower && *lower);
  EXPECT_EQ(**lower, a);
  EXPECT_EQ(TieredStore::last_hit_tier(), 1);
  auto upper = c->store->get_shared(a.passport.key);
  auto again = c->store->get_shared(a.passport.key);
  ASSERT_TRUE(upper && *upper && again && *again);
  EXPECT_EQ(TieredStore::last_hit_tier(), 0);
  EXPECT_EQ(upper->get(), again->get());
  EXPECT_EQ(**upper, a);
  auto missing = c->store->get_shared(blob("absent").passport.key);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, nullptr);
  EXPECT_EQ(TieredStore::last_hit_tier(), -1);
}

TEST(TieredStore, PutWritesEveryTier) {
  auto c = make_chain();
  const Artifact a = blob("a");
  EXPECT_EQ(c->store->put(a).value(), PutOutcome::stored);
  EXPECT_TRUE(c->store->tier(0).get(a.passport.key)->has_value());
  EXPECT_TRUE(c->store->tier(1).get(a.passport.key)->has_value());
  EXPECT_EQ(c->store->put(a).value(), PutOutcome::already_present);
}

TEST(TieredStore, PutReportsTheOutcomeOfTheLowestTier) {
  auto c = make_chain();
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->tier(1).put(a));
  // The memory tier stores it now, but the durable tier already held it.
  EXPECT_EQ(c->store->put(a).value(), PutOutcome::already_present);
  EXPECT_TRUE(c->store->tier(0).get(a.passport.key)->has_value());
}

TEST(TieredStore, LowerTierHitFillsTheUpperTierAndReportsWhichTierServed) {
  auto c = make_chain();
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->tier(1).put(a));
  ASSERT_FALSE(c->store->tier(0).get(a.passport.key)->has_value());

  auto first = c->store->get(a.passport.key);
  ASSERT_TRUE(first && first->has_value());
  EXPECT_EQ(**first, a);
  EXPECT_EQ(TieredStore::last_hit_tier(), 1);

  auto second = c->store->get(a.passport.key);
  ASSERT_TRUE(second && second->has_value());
  EXPECT_EQ(**second, a);
  EXPECT_EQ(TieredStore::last_hit_tier(), 0);
  EXPECT_EQ(c->upper->stats()->entries, 1U);
}

// Counts how it is written to, and forwards to a real MemoryStore.
class RecordingTier final : public Store {
 public:
  std::string_view name() const noexcept override { return "recording"; }
  Result<std::optional<Artifact>> get(const Key& key) override { return m_inner.get(key); }
  Result<PutOutcome> put(const Artifact& a) override {
    ++puts;
    return m_inner.put(a);
  }
  Result<PutOutcome> fill(const Artifact& a) override {
    ++fills;
    return m_inner.fill(a);
  }
  Result<bool> remove(const Key& key) override { return m_inner.remove(key); }
  Result<std::vector<EntryInfo>> list() override { return m_inner.list(); }
  Result<StoreStats> stats() override { return m_inner.stats(); }
  int puts = 0;
  int fills = 0;

 private:
  MemoryStore m_inner{1 << 20};
};

// A lower-tier hit was verified by that tier: the upper tiers are filled
// through fill(), which need not hash the payload again.
TEST(TieredStore, LowerTierHitFillsUpperTiersWithoutAPut) {
  auto upper = std::make_unique<RecordingTier>();
  RecordingTier* recorder = upper.get();
  auto lower = std::make_unique<MemoryStore>(1 << 20);
  const Artifact a = Artifact::make(KeyBuilder("test").add("n", "fill"), "blob", std::string(4096, 'f'));
  ASSERT_TRUE(lower->put(a).has_value());
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::move(upper));
  tiers.push_back(std::move(lower));
  TieredStore chain(std::move(tiers));
  auto got = chain.get(a.passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(recorder->fills, 1);
  EXPECT_EQ(recorder->puts, 0);
  auto again = recorder->get(a.passport.key);
  ASSERT_TRUE(again.has_value() && again->has_value());
  EXPECT_EQ((*again)->payload, a.payload);
}

TEST(TieredStore, MissEverywhereIsAMissAndLastHitTierIsMinusOne) {
  auto c = make_chain();
  auto got = c->store->get(blob("nothing").passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(TieredStore::last_hit_tier(), -1);
  const auto s = c->store->stats().value();
  EXPECT_EQ(s.misses, 1U);
  EXPECT_EQ(s.hits, 0U);
}

TEST(TieredStore, LastHitTierIsPerThread) {
  auto c = make_chain();
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->tier(1).put(a));
  ASSERT_TRUE(c->store->get(a.passport.key)->has_value());
  ASSERT_EQ(TieredStore::last_hit_tier(), 1);
  int other = 99;
  std::thread([&] {
    other = TieredStore::last_hit_tier();
  }).join();
  EXPECT_EQ(other, -1);
  EXPECT_EQ(TieredStore::last_hit_tier(), 1);
}

TEST(TieredStore, FailingTierIsSkippedCountedAndWarnedAboutOnce) {
  auto c = make_chain();
  c->broken = true;
  const Artifact a = blob("a");
  // The memory tier still takes the put, so the chain succeeds.
  EXPECT_EQ(c->store->put(a).value(), PutOutcome::stored);
  auto got = c->store->get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, a);
  auto miss = c->store->get(blob("b").passport.key);
  ASSERT_TRUE(miss.has_value());
  EXPECT_FALSE(miss->has_value());
  EXPECT_TRUE(c->store->remove(a.passport.key).value());

  EXPECT_EQ(c->store->tier_failures(1), 3U);  // put, get of "b", remove
  EXPECT_EQ(c->store->tier_failures(0), 0U);
  ASSERT_EQ(c->warnings.size(), 1U);
  EXPECT_NE(c->warnings[0].find("flaky"), std::string::npos) << c->warnings[0];
  EXPECT_NE(c->warnings[0].find("injected EIO"), std::string::npos) << c->warnings[0];
  // stats() of the chain works with the tier down and counts its failures.
  const auto s = c->store->stats().value();
  EXPECT_GE(s.errors, 3U);
}

TEST(TieredStore, RecoveredTierIsUsedAgain) {
  auto c = make_chain();
  c->broken = true;
  const Artifact a = blob("a");
  ASSERT_TRUE(c->store->put(a));
  c->broken = false;
  const Artifact b = blob("b");
  ASSERT_TRUE(c->store->put(b));
  EXPECT_TRUE(c->store->tier(1).get(b.passport.key)->has_value());
  EXPECT_FALSE(c->store->tier(1).get(a.passport.key)->has_value());
  EXPECT_EQ(c->warnings.size(), 1U);
}

TEST(TieredStore, ErrorOnlyWhenEveryTierFails) {
  std::atomic<bool> broken{true};
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::make_unique<SwitchableTier>(broken));
  tiers.push_back(std::make_unique<SwitchableTier>(broken));
  std::vector<std::string> warnings;
  TieredStore store(std::move(tiers), [&](const std::string& w) { warnings.push_back(w); });
  const Artifact a = blob("a");
  auto put = store.put(a);
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::io);
  auto got = store.get(a.passport.key);
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::io);
  EXPECT_EQ(warnings.size(), 2U);  // once per tier
}

TEST(TieredStore, CorruptArtifactIsRejectedNotCountedAsATierFailure) {
  auto c = make_chain();
  Artifact a = blob("a");
  std::string bytes(a.payload);
  bytes[0] ^= 1;
  a.payload = std::move(bytes);
  auto put = c->store->put(a);
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::corrupt);
  EXPECT_EQ(c->store->tier_failures(0), 0U);
  EXPECT_TRUE(c->warnings.empty());
}

TEST(TieredStore, ListIsTheUnionWithEachKeyOnce) {
  auto c = make_chain();
  const Artifact a = blob("a", 10);
  const Artifact b = blob("b", 20);
  ASSERT_TRUE(c->store->put(a));
  ASSERT_TRUE(c->store->tier(1).put(b));
  auto entries = c->store->list().value();
  ASSERT_EQ(entries.size(), 2U);
  std::sort(entries.begin(), entries.end(),
            [](const EntryInfo& x, const EntryInfo& y) { return x.payload_size < y.payload_size; });
  EXPECT_EQ(entries[0].key, a.passport.key);
  EXPECT_EQ(entries[1].key, b.passport.key);
}

TEST(TieredStore, StatsCountChainHitsAndCompileTimeSaved) {
  auto c = make_chain();
  Artifact a = blob("a");
  a.passport.compile_duration_us = 5000;
  ASSERT_TRUE(c->store->put(a));
  ASSERT_TRUE(c->store->get(a.passport.key)->has_value());
  ASSERT_TRUE(c->store->get(a.passport.key)->has_value());
  ASSERT_FALSE(c->store->get(blob("z").passport.key)->has_value());
  const auto s = c->store->stats().value();
  EXPECT_EQ(s.hits, 2U);
  EXPECT_EQ(s.misses, 1U);
  EXPECT_EQ(s.compile_us_saved, 10000U);
  EXPECT_EQ(s.entries, 1U);
  EXPECT_EQ(s.puts, 2U);  // one per tier
}

#include "kcache/file_store.hpp"
#include "support/temp_dir.hpp"

// The real chain: memory in front of a FileStore. A second chain over the same
// directory (as another process would open) hits on disk and fills its memory.
TEST(TieredStore, MemoryInFrontOfFileServesFromDiskThenFromMemory) {
  kcache::test::TempDir dir;
  auto open_chain = [&] {
    kcache::FileStoreOptions o;
    o.root = dir.path() / "cache";
    auto file = kcache::FileStore::open(o);
    EXPECT_TRUE(file.has_value());
    std::vector<std::unique_ptr<Store>> tiers;
    tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
    tiers.push_back(std::move(*file));
    return std::make_unique<TieredStore>(std::move(tiers));
  };
  const Artifact a = blob("a", 20000);
  {
    auto first = open_chain();
    ASSERT_EQ(first->put(a).value(), PutOutcome::stored);
  }
  auto second = open_chain();
  EXPECT_EQ(second->put(a).value(), PutOutcome::already_present);
  ASSERT_TRUE(second->remove(a.passport.key).value());
  ASSERT_TRUE(open_chain()->put(a));
  auto got = second->get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, a);
  EXPECT_EQ(TieredStore::last_hit_tier(), 1);
  got = second->get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, a);
  EXPECT_EQ(TieredStore::last_hit_tier(), 0);
  EXPECT_EQ(second->tier_failures(1), 0U);
}
