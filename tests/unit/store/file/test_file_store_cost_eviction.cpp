// FileStore cost-aware eviction (issue 21): with eviction_policy = cost the
// cap drops entries cheap to rebuild per byte before expensive ones, ages
// them by time since last use, and a replayed trace of mixed kernels with
// real recorded NVRTC compile times rebuilds far less than under lru.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "store/file/entry_cost.hpp"
#include "support/eviction_trace.hpp"
#include "support/temp_dir.hpp"
#include "unit/store/file/file_store_test_util.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using test::age_entry;
using test::make_artifact;
using test::open_store;
using test::passport_path;
using test::quiet_options;

TEST(FileStoreCostEviction, TheCostIsRecordedInThePayloadMtimeNanoseconds) {
  for (const std::uint64_t us : {0ULL, 1ULL, 999ULL, 1000ULL, 12'345'678ULL, 999'999'000ULL}) {
    const auto back = store::decode_cost_nanos(store::encode_cost_nanos(us));
    ASSERT_TRUE(back.has_value()) << us;
    EXPECT_EQ(*back, (us + 999) / 1000 * 1000) << us;
  }
  EXPECT_EQ(*store::decode_cost_nanos(store::encode_cost_nanos(5'000'000'000ULL)), store::k_cost_max_ms * 1000)
      << "clamped";
  EXPECT_FALSE(store::decode_cost_nanos(0).has_value()) << "a filesystem of whole seconds";
  EXPECT_FALSE(store::decode_cost_nanos(123'456'000).has_value()) << "no tag";
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  auto store = open_store(o);
  auto a = make_artifact(1, 1, 1000);
  a.passport.compile_duration_us = 4'200'000;
  ASSERT_TRUE(store->put(a).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(test::payload_path(o.root, a.passport.key).c_str(), &st), 0);
  EXPECT_EQ(store::decode_cost_nanos(st.st_mtim.tv_nsec), std::optional<std::uint64_t>(4'200'000));
  EXPECT_LE(std::abs(st.st_mtime - std::time(nullptr)), 5) << "the seconds stay the time of the put";
}

// 60 entries of one size and one age: 30 took 3 s to build, 30 took 20 ms.
// A cap that forces about 20 evictions takes them from the cheap ones under
// cost, and from both under lru (which sees only the age).
TEST(FileStoreCostEviction, CheapEntriesGoFirstExpensiveOnesStay) {
  for (const auto policy : {EvictionPolicy::cost, EvictionPolicy::lru}) {
    test::TempDir dir;
    auto o = quiet_options(dir.path() / "cache");
    o.max_size_bytes = 1 << 20;
    o.eviction_policy = policy;
    std::vector<Key> cheap;
    std::vector<Key> dear;
    {
      auto store = open_store(o);
      for (std::uint64_t i = 0; i < 60; ++i) {
        auto a = make_artifact(100 + i, i, 2000);
        a.passport.compile_duration_us = i % 2 == 0 ? 3'000'000 : 20'000;
        ASSERT_TRUE(store->put(a).has_value());
        (i % 2 == 0 ? dear : cheap).push_back(a.passport.key);
      }
    }
    // Interleaved ages: within each kind, older and newer alike.
    for (std::size_t i = 0; i < 30; ++i) {
      age_entry(o.root, dear[i], 1000 - static_cast<int>(2 * i));
      age_entry(o.root, cheap[i], 1000 - static_cast<int>(2 * i + 1));
    }
    const auto s0 = open_store(o)->stats();
    o.max_size_bytes = s0->size_bytes + s0->metadata_bytes - 18 * 2600;
    auto store = open_store(o);
    for (std::uint64_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(store->put(make_artifact(9000 + i, i, 2000)).has_value());
    }
    std::size_t dear_left = 0;
    std::size_t cheap_left = 0;
    for (const auto& k : dear) {
      dear_left += fs::exists(passport_path(o.root, k)) ? 1 : 0;
    }
    for (const auto& k : cheap) {
      cheap_left += fs::exists(passport_path(o.root, k)) ? 1 : 0;
    }
    const auto evicted = store->stats()->evictions;
    EXPECT_GE(evicted, 18U);
    if (policy == EvictionPolicy::cost) {
      EXPECT_EQ(dear_left, 30U) << "cost: an expensive entry was evicted before a cheap one";
      EXPECT_LE(cheap_left, 30U - 18U);
    } else {
      EXPECT_LT(dear_left, 30U) << "lru: the oldest go, whatever they cost";
      EXPECT_GT(cheap_left, 30U - evicted);
    }
  }
}

// Aging: an expensive entry unused for long enough goes before a cheap one
// used just now (cost / (bytes x age): 3 s over 10^6 s of age is worth less
// than 20 ms over 1 s).
TEST(FileStoreCostEviction, AnExpensiveEntryUnusedForLongAgesOut) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.max_size_bytes = 1 << 20;
  auto dear = make_artifact(1, 1, 2000);
  dear.passport.compile_duration_us = 3'000'000;
  auto cheap = make_artifact(2, 2, 2000);
  cheap.passport.compile_duration_us = 20'000;
  o.low_watermark_percent = 99;  // a cut of 1 %: the put evicts exactly what it needs
  {
    auto store = open_store(o);
    ASSERT_TRUE(store->put(dear).has_value());
    ASSERT_TRUE(store->put(cheap).has_value());
    // Fillers worth more than both (1 s over 10 s of age), so that the cap is
    // well above the metadata.
    for (std::uint64_t i = 0; i < 10; ++i) {
      auto a = make_artifact(100 + i, i, 2000);
      a.passport.compile_duration_us = 1'000'000;
      ASSERT_TRUE(store->put(a).has_value());
      age_entry(o.root, a.passport.key, 10);
    }
  }
  age_entry(o.root, dear.passport.key, 1'000'000);
  age_entry(o.root, cheap.passport.key, 1);
  const auto s0 = open_store(o)->stats();
  o.max_size_bytes = s0->size_bytes + s0->metadata_bytes + 1000;  // room for one more needs one to go
  auto store = open_store(o);
  ASSERT_TRUE(store->put(make_artifact(3, 3, 2000)).has_value());
  EXPECT_EQ(store->stats()->evictions, 1U);
  EXPECT_FALSE(fs::exists(passport_path(o.root, dear.passport.key)));
  EXPECT_TRUE(fs::exists(passport_path(o.root, cheap.passport.key)));
}

// Uses (store/file/entry_cost.hpp): each refresh of the last-use stamp counts one
// in the passport mtime's last digits, which a put and an older kcache leave
// as 1; the cost policy weighs them (uses x cost / (bytes x age)), gds does
// not. Entry A, used 5 times, last 100 s ago; B, used once, 40 s ago; same
// cost and size: gds drops A (older), cost drops B (5/100 > 1/40).
TEST(FileStoreCostEviction, UsesAreCountedAndTheCostPolicyKeepsTheMoreUsedEntry) {
  for (std::uint64_t uses = 1; uses <= store::k_uses_max; ++uses) {
    EXPECT_EQ(store::decode_uses_nanos(store::encode_uses_nanos(123'456'789, uses)), uses);
    EXPECT_EQ(store::encode_uses_nanos(123'456'789, uses) / 1000, 123'456) << "microseconds kept";
  }
  EXPECT_EQ(store::decode_uses_nanos(store::encode_uses_nanos(0, 1000)), store::k_uses_max) << "saturates";
  EXPECT_EQ(store::decode_uses_nanos(0), 1U) << "a filesystem of whole seconds";
  EXPECT_EQ(store::decode_uses_nanos(123'456'001), 1U) << "no check";
  for (const auto policy : {EvictionPolicy::cost, EvictionPolicy::gds}) {
    test::TempDir dir;
    auto o = quiet_options(dir.path() / "cache");
    o.touch_interval = std::chrono::seconds(0);  // every hit refreshes the stamp
    o.low_watermark_percent = 99;                // a cut of 1 %: the put evicts exactly what it needs
    o.eviction_policy = policy;
    auto a = make_artifact(1, 1, 2000);
    auto b = make_artifact(2, 2, 2000);
    a.passport.compile_duration_us = b.passport.compile_duration_us = 2'000'000;
    {
      auto store = open_store(o);
      ASSERT_TRUE(store->put(a).has_value());
      ASSERT_TRUE(store->put(b).has_value());
      for (int i = 0; i < 4; ++i) {
        auto got = store->get(a.passport.key);
        ASSERT_TRUE(got && got->has_value());
      }
      // Fillers worth more than both (5 s over 10 s of age), so that the cap
      // is well above the metadata.
      for (std::uint64_t i = 0; i < 10; ++i) {
        auto f = make_artifact(100 + i, i, 2000);
        f.passport.compile_duration_us = 5'000'000;
        ASSERT_TRUE(store->put(f).has_value());
        age_entry(o.root, f.passport.key, 10);
      }
    }
    struct stat st {};
    ASSERT_EQ(::stat(passport_path(o.root, a.passport.key).c_str(), &st), 0);
    EXPECT_EQ(store::decode_uses_nanos(st.st_mtim.tv_nsec), 5U) << "the put and 4 refreshes";
    ASSERT_EQ(::stat(passport_path(o.root, b.passport.key).c_str(), &st), 0);
    EXPECT_EQ(store::decode_uses_nanos(st.st_mtim.tv_nsec), 1U);
    // Ages set by the seconds alone, keeping the counts in the nanoseconds.
    for (const auto& [key, ago] : {std::pair{a.passport.key, 100}, std::pair{b.passport.key, 40}}) {
      ASSERT_EQ(::stat(passport_path(o.root, key).c_str(), &st), 0);
      const struct timespec times[2] = {{0, UTIME_OMIT}, {std::time(nullptr) - ago, st.st_mtim.tv_nsec}};
      ASSERT_EQ(::utimensat(AT_FDCWD, passport_path(o.root, key).c_str(), times, 0), 0);
    }
    const auto s0 = open_store(o)->stats();
    o.max_size_bytes = s0->size_bytes + s0->metadata_bytes + 1000;  // room for one more needs one to go
    auto store = open_store(o);
    ASSERT_TRUE(store->put(make_artifact(3, 3, 2000)).has_value());
    EXPECT_EQ(store->stats()->evictions, 1U);
    const bool a_kept = fs::exists(passport_path(o.root, a.passport.key));
    const bool b_kept = fs::exists(passport_path(o.root, b.passport.key));
    if (policy == EvictionPolicy::cost) {
      EXPECT_TRUE(a_kept && !b_kept) << "cost: the entry used 5 times stays";
    } else {
      EXPECT_TRUE(!a_kept && b_kept) << "gds: the older goes, whatever its uses";
    }
  }
}

// Replays `trace` under a cap of a quarter of its catalogue with `policy`.
test::ReplayResult replay_under_cap(const test::Trace& trace, EvictionPolicy policy) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.touch_interval = std::chrono::seconds(0);
  o.eviction_policy = policy;
  const std::uint64_t pass_bytes = test::trace_artifact(trace.kernels[0]).passport.to_json().size();
  o.max_size_bytes = (trace.catalogue_bytes + trace.kernels.size() * pass_bytes) / 4;
  auto store = open_store(o);
  auto r = test::replay(*store, trace);
  const auto s = store->stats();
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
  EXPECT_EQ(r.errors, 0U);
  EXPECT_EQ(s->corrupt, 0U);
  return r;
}

void print_results(const char* what, const test::ReplayResult& lru, const test::ReplayResult& cost) {
  std::printf("[trace %s] lru: %llu misses, rebuild %.1f s (after first use %.1f s, heavy misses %llu); "
              "cost: %llu misses, rebuild %.1f s (after first use %.1f s, heavy misses %llu)\n",
              what, static_cast<unsigned long long>(lru.misses), static_cast<double>(lru.rebuild_us) / 1e6,
              static_cast<double>(lru.warm_rebuild_us()) / 1e6, static_cast<unsigned long long>(lru.heavy_misses),
              static_cast<unsigned long long>(cost.misses), static_cast<double>(cost.rebuild_us) / 1e6,
              static_cast<double>(cost.warm_rebuild_us()) / 1e6, static_cast<unsigned long long>(cost.heavy_misses));
}

// The replayed trace (tests/support/eviction_trace.hpp): 200 kernels (70 %
// trivial, 20 % medium, 10 % heavy CUB, each with the compile time of a real
// NVRTC compile recorded in bench/data/nvrtc_compile_costs.json), 2500 Zipf
// requests, a cap of a quarter of the catalogue (bench_eviction_trace runs
// the same at 4000 kernels).
//
// With cubin sizes drawn independently of the build time (TraceSizes::
// shuffled: the recorded sizes, in random order), the rebuild time after the
// first request of each kernel must be at least 2x less under cost. With each
// kernel's own recorded size, build time per byte is nearly the same for the
// three kernels (15-31 us per cubin byte here), so no per-byte policy can
// gain much; cost must then do no worse than lru (within 10 %).
TEST(FileStoreCostEviction, AReplayedTraceOfMixedKernelsKeepsTheExpensiveOnes) {
  const auto recorded =
      test::load_recorded_compiles(fs::path(KCACHE_SOURCE_DIR) / "bench" / "data" / "nvrtc_compile_costs.json");
  ASSERT_FALSE(recorded.empty()) << "bench/data/nvrtc_compile_costs.json is missing or malformed";
  {
    const auto trace = test::make_trace(recorded, 200, 2500, 0.8, 21, test::TraceSizes::shuffled, test::corpus_mix());
    ASSERT_EQ(trace.kernels.size(), 200U);
    const auto lru = replay_under_cap(trace, EvictionPolicy::lru);
    const auto cost = replay_under_cap(trace, EvictionPolicy::cost);
    print_results("shuffled sizes", lru, cost);
    EXPECT_EQ(lru.cold_us, cost.cold_us) << "the same trace";
    EXPECT_LE(cost.warm_rebuild_us() * 2, lru.warm_rebuild_us());
    EXPECT_LT(cost.heavy_misses * 2, lru.heavy_misses);
    EXPECT_LT(cost.rebuild_us, lru.rebuild_us);
  }
  {
    const auto trace = test::make_trace(recorded, 200, 2500, 0.8, 21, test::TraceSizes::recorded, test::corpus_mix());
    const auto lru = replay_under_cap(trace, EvictionPolicy::lru);
    const auto cost = replay_under_cap(trace, EvictionPolicy::cost);
    print_results("recorded sizes", lru, cost);
    EXPECT_LE(cost.rebuild_us, lru.rebuild_us + lru.rebuild_us / 10);
  }
}

}  // namespace
}  // namespace kcache
