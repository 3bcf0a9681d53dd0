// FileStore eviction at the cap (issue 13 item 2): the least recently used
// entries go first, an entry used since goes later, and a put at the cap
// evicts one window's worth (bounded work), not the whole cache down to the
// low watermark.
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

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

// A cap that holds what the store at `o.root` (filled under the larger cap
// `o.max_size_bytes`, which sized its metadata) holds now plus `slack` bytes.
std::uint64_t cap_holding_current(const FileStoreOptions& o, std::uint64_t slack) {
  const auto s = open_store(o)->stats();
  EXPECT_EQ(s->evictions, 0U);
  return s->size_bytes + s->metadata_bytes + slack;
}

TEST(FileStoreEviction, LeastRecentlyUsedEntriesGoFirstAndUsedOnesStay) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.touch_interval = std::chrono::seconds(0);
  o.max_size_bytes = 1 << 20;  // the fill stays under it
  std::vector<Key> old_keys;
  {
    auto store = open_store(o);
    for (std::uint64_t i = 0; i < 90; ++i) {
      const auto a = make_artifact(1000 + i, i, 1000);
      ASSERT_TRUE(store->put(a).has_value());
      old_keys.push_back(a.passport.key);
    }
  }
  // Entry i was last used 1000 - i seconds ago: entry 0 is the oldest.
  for (std::size_t i = 0; i < old_keys.size(); ++i) {
    age_entry(o.root, old_keys[i], 1000 - static_cast<int>(i));
  }
  o.max_size_bytes = cap_holding_current(o, 200);
  auto store = open_store(o);
  // The five oldest are used now: they become the most recently used.
  for (std::size_t i = 0; i < 5; ++i) {
    auto got = store->get(old_keys[i]);
    ASSERT_TRUE(got.has_value() && got->has_value());
  }
  std::vector<Key> new_keys;
  for (std::uint64_t i = 0; i < 10; ++i) {
    const auto a = make_artifact(5000 + i, i, 1000);
    ASSERT_TRUE(store->put(a).has_value());
    new_keys.push_back(a.passport.key);
  }
  const auto s = store->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
  EXPECT_GE(s->evictions, 10U);
  for (const auto& k : new_keys) {
    EXPECT_TRUE(fs::exists(passport_path(o.root, k))) << "a new entry was evicted: " << k.hex();
  }
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(fs::exists(passport_path(o.root, old_keys[i]))) << "entry " << i << " was used, yet evicted";
  }
  // Among the rest, every evicted entry is older than every survivor (this
  // cache is smaller than one eviction window, so the choice is exact LRU).
  std::size_t last_evicted = 0;
  std::size_t first_kept = old_keys.size();
  for (std::size_t i = 5; i < old_keys.size(); ++i) {
    if (fs::exists(passport_path(o.root, old_keys[i]))) {
      first_kept = std::min(first_kept, i);
    } else {
      last_evicted = i;
    }
  }
  EXPECT_GT(last_evicted, 5U) << "nothing old was evicted";
  EXPECT_LT(last_evicted, first_kept) << "entry " << last_evicted << " was evicted while older entry " << first_kept
                                      << " stayed";
}

TEST(FileStoreEviction, APutAtTheCapEvictsOneWindowNotTheWholeCache) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  constexpr std::uint64_t k_entries = 2000;
  o.max_size_bytes = 8 << 20;  // the fill stays under it
  {
    auto store = open_store(o);
    for (std::uint64_t i = 0; i < k_entries; ++i) {
      ASSERT_TRUE(store->put(make_artifact(i, i, 64)).has_value());
    }
  }
  o.max_size_bytes = cap_holding_current(o, 0);
  auto store = open_store(o);
  ASSERT_TRUE(store->put(make_artifact(k_entries + 1, 1, 64)).has_value());
  const auto s = store->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
  // One step: a window of at least 512 entries loses its cut (10 % at the
  // default low watermark), about 51 entries; evicting down to the low
  // watermark of the whole cache would have been 200.
  EXPECT_GE(s->evictions, 1U);
  EXPECT_LE(s->evictions, k_entries / 20) << "the put evicted far more than one window's cut";
  // The steps that follow go on from where this one ended: 40 more puts at
  // the cap keep the cache full and between them evict about one entry each.
  for (std::uint64_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(store->put(make_artifact(k_entries + 100 + i, i, 64)).has_value());
  }
  const auto after = store->stats();
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(after->size_bytes + after->metadata_bytes, o.max_size_bytes);
  EXPECT_GE(after->entries, k_entries * 95 / 100);
  EXPECT_LE(after->evictions, 200U + k_entries / 20);
}

}  // namespace
}  // namespace kcache
