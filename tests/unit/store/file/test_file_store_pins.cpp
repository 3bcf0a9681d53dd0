// FileStore pins (issue 21): a pinned entry is never evicted by the size cap,
// pins are counted in stats, pins that alone fill the cap are reported (puts
// refused, a warning) instead of evicted or grown past the cap, clear keeps
// them unless asked, and the cap with pins holds across processes.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kcache/memory_store.hpp"
#include "kcache/tiered_store.hpp"
#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "unit/store/file/file_store_test_util.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using test::make_artifact;
using test::open_store;
using test::passport_path;
using test::quiet_options;

std::filesystem::path pin_path(const fs::path& root, const Key& key) {
  return root / "v1" / "entries" / key.shard() / (key.hex() + ".pin");
}

// Bytes of an entry on disk: payload + passport.
std::uint64_t entry_bytes(const fs::path& root, const Key& key) {
  return fs::file_size(test::payload_path(root, key)) + fs::file_size(passport_path(root, key));
}

TEST(FileStorePins, PinnedEntriesSurviveACapThatEvictsEverythingElse) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.max_size_bytes = 256 * 1024;
  auto store = open_store(o);
  std::vector<Key> pinned;
  std::uint64_t pinned_bytes = 0;
  for (std::uint64_t i = 0; i < 8; ++i) {
    const auto a = make_artifact(100 + i, i, 4000);
    ASSERT_TRUE(store->put(a).has_value());
    auto p = store->pin(a.passport.key);
    ASSERT_TRUE(p.has_value()) << p.error().describe();
    EXPECT_TRUE(*p);
    EXPECT_TRUE(store->pinned(a.passport.key));
    pinned.push_back(a.passport.key);
    pinned_bytes += entry_bytes(o.root, a.passport.key);
  }
  // Pinning again is no change.
  auto again = store->pin(pinned[0]);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(*again);
  // 10x the cap of fresh entries: without pins the pinned ones, the oldest, would go first.
  for (std::uint64_t i = 0; i < 640; ++i) {
    ASSERT_TRUE(store->put(make_artifact(10'000 + i, i, 4000)).has_value()) << i;
  }
  const auto s = store->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->evictions, 500U);
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
  EXPECT_EQ(s->pinned_entries, pinned.size());
  EXPECT_EQ(s->pinned_bytes, pinned_bytes);
  EXPECT_FALSE(s->pins_over_cap);
  for (const auto& k : pinned) {
    auto got = store->get(k);
    ASSERT_TRUE(got.has_value() && got->has_value()) << "a pinned entry was evicted: " << k.hex();
  }
  // prune to a size below the pins evicts the rest and says why it stops.
  auto pruned = store->prune(pinned_bytes / 2);
  ASSERT_FALSE(pruned.has_value());
  EXPECT_EQ(pruned.error().code, ErrorCode::no_space);
  EXPECT_NE(pruned.error().message.find("pinned"), std::string::npos) << pruned.error().message;
  for (const auto& k : pinned) {
    EXPECT_TRUE(fs::exists(passport_path(o.root, k))) << k.hex();
  }
  EXPECT_EQ(store->stats()->entries, pinned.size());
  // Unpinned, an entry is evicted like any other.
  ASSERT_TRUE(*store->unpin(pinned[0]));
  EXPECT_FALSE(fs::exists(pin_path(o.root, pinned[0])));
  EXPECT_FALSE(*store->unpin(pinned[0]));
  EXPECT_EQ(store->stats()->pinned_entries, pinned.size() - 1);
  // A prune to exactly the other pins' size (plus the metadata, which the
  // cap also pays for) evicts it.
  const std::uint64_t first_bytes = entry_bytes(o.root, pinned[0]);
  auto to_pins = store->prune(store->stats()->metadata_bytes + pinned_bytes - first_bytes);
  ASSERT_TRUE(to_pins.has_value()) << to_pins.error().describe();
  EXPECT_FALSE(fs::exists(passport_path(o.root, pinned[0])));
  // verify finds the pin accounting exact.
  auto v = store->verify(Repair::no);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
}

TEST(FileStorePins, PinningAMissingEntryIsNotFoundAndRemoveTakesThePin) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  auto store = open_store(o);
  const auto a = make_artifact(1, 1, 100);
  auto missing = store->pin(a.passport.key);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  ASSERT_TRUE(store->put(a).has_value());
  ASSERT_TRUE(*store->pin(a.passport.key));
  auto list = store->list();
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 1U);
  EXPECT_TRUE(list->front().pinned);
  ASSERT_TRUE(*store->remove(a.passport.key));
  EXPECT_FALSE(fs::exists(pin_path(o.root, a.passport.key)));
  EXPECT_EQ(store->stats()->pinned_entries, 0U);
  EXPECT_EQ(store->stats()->pinned_bytes, 0U);
}

TEST(FileStorePins, PinsThatFillTheCapAreReportedAndPutsRefusedNotGrown) {
  test::TempDir dir;
  std::vector<std::string> warnings;
  auto o = quiet_options(dir.path() / "cache", &warnings);
  o.max_size_bytes = 1 << 20;
  std::vector<Key> keys;
  {
    auto store = open_store(o);
    for (std::uint64_t i = 0; i < 40; ++i) {
      const auto a = make_artifact(i, i, 8000);
      ASSERT_TRUE(store->put(a).has_value());
      ASSERT_TRUE(*store->pin(a.passport.key));
      keys.push_back(a.passport.key);
    }
  }
  // The cap is lowered below what the pins hold.
  o.max_size_bytes = 200 * 1024;
  auto store = open_store(o);
  const auto before = store->stats();
  ASSERT_TRUE(before.has_value());
  EXPECT_TRUE(before->pins_over_cap);
  EXPECT_EQ(before->pinned_entries, keys.size());
  const auto put = store->put(make_artifact(999, 999, 1000));
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::no_space);
  EXPECT_NE(put.error().message.find("pinned entries hold"), std::string::npos) << put.error().message;
  ASSERT_TRUE(store->put(make_artifact(998, 998, 1000)).error().code == ErrorCode::no_space);
  ASSERT_EQ(warnings.size(), 1U) << "one warning per store";
  EXPECT_NE(warnings[0].find("unpin"), std::string::npos) << warnings[0];
  const auto after = store->stats();
  EXPECT_EQ(after->entries, keys.size()) << "nothing pinned was evicted, nothing new was stored";
  EXPECT_EQ(after->size_bytes, before->size_bytes);
  EXPECT_EQ(after->puts_skipped, before->puts_skipped + 2);
  for (const auto& k : keys) {
    EXPECT_TRUE(fs::exists(passport_path(o.root, k))) << k.hex();
  }
}

TEST(FileStorePins, ClearKeepsPinnedEntriesUnlessAskedToRemoveThem) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  auto store = open_store(o);
  std::vector<Key> keys;
  for (std::uint64_t i = 0; i < 6; ++i) {
    const auto a = make_artifact(i, i, 500);
    ASSERT_TRUE(store->put(a).has_value());
    keys.push_back(a.passport.key);
  }
  ASSERT_TRUE(*store->pin(keys[0]));
  ASSERT_TRUE(*store->pin(keys[1]));
  auto removed = store->clear();
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(*removed, 4U);
  EXPECT_EQ(store->stats()->entries, 2U);
  EXPECT_EQ(store->stats()->pinned_entries, 2U);
  EXPECT_EQ(store->stats()->size_bytes, entry_bytes(o.root, keys[0]) + entry_bytes(o.root, keys[1]));
  removed = store->clear(ClearPinned::remove);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(*removed, 2U);
  EXPECT_EQ(store->stats()->entries, 0U);
  EXPECT_EQ(store->stats()->pinned_entries, 0U);
  EXPECT_EQ(store->stats()->pinned_bytes, 0U);
  EXPECT_FALSE(fs::exists(pin_path(o.root, keys[0])));
}

// C03 with pins: writers in 4 processes under a cap, a quarter of the cap
// pinned by the parent first; afterwards every pinned entry is there, the
// disk is within the cap, and the accounting matches a recount.
TEST(FileStorePins, CapWithPinsHoldsAcrossProcesses) {
  test::TempDir dir;
  auto o = quiet_options(dir.path() / "cache");
  o.stale_temp_age = std::chrono::seconds(3600);
  o.max_size_bytes = 512 * 1024;
  std::vector<Key> pinned;
  {
    auto store = open_store(o);
    for (std::uint64_t i = 0; i < 16; ++i) {
      const auto a = make_artifact(50'000 + i, i, 8000);
      ASSERT_TRUE(store->put(a).has_value());
      ASSERT_TRUE(*store->pin(a.passport.key));
      pinned.push_back(a.passport.key);
    }
  }
  std::vector<pid_t> pids;
  for (int w = 0; w < 4; ++w) {
    pids.push_back(test::fork_child([&, w] {
      auto s = FileStore::open(o);
      if (!s) return 3;
      for (int k = 0; k < 150; ++k) {
        const auto seed = static_cast<std::uint64_t>(w * 10000 + k);
        if (!(*s)->put(make_artifact(seed, seed, 4096 + (seed * 7919) % 12288))) return 4;
      }
      return 0;
    }));
  }
  for (pid_t p : pids) {
    const int st = test::wait_child(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << test::describe_status(st);
  }
  auto store = open_store(o);
  const auto s = store->stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->evictions, 100U);
  EXPECT_LE(s->size_bytes + s->metadata_bytes, o.max_size_bytes);
  EXPECT_EQ(s->pinned_entries, pinned.size());
  for (const auto& k : pinned) {
    auto got = store->get(k);
    ASSERT_TRUE(got.has_value() && got->has_value()) << "a pinned entry was evicted: " << k.hex();
  }
  auto v = store->verify(Repair::no);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->counted_bytes, v->disk_bytes);
  EXPECT_EQ(v->disk_bytes, s->size_bytes);
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
}

}  // namespace
}  // namespace kcache

namespace kcache {
namespace {

// A chain lists each key once with the fastest tier's facts; the pin, which
// only the file tier knows, still shows (Python Store.list, `kcache ls`).
TEST(FileStorePins, AChainListsAPinTheMemoryTierDoesNotKnow) {
  test::TempDir dir;
  auto file = test::open_store(test::quiet_options(dir.path() / "cache"));
  FileStore* disk = file.get();
  std::vector<std::unique_ptr<Store>> tiers;
  tiers.push_back(std::make_unique<MemoryStore>(1 << 20));
  tiers.push_back(std::move(file));
  TieredStore chain(std::move(tiers));
  const auto a = test::make_artifact(7, 1, 5000);
  const auto b = test::make_artifact(8, 2, 5000);
  ASSERT_TRUE(chain.put(a).has_value());
  ASSERT_TRUE(chain.put(b).has_value());
  ASSERT_TRUE(disk->pin(a.passport.key).value());
  auto listed = chain.list();
  ASSERT_TRUE(listed.has_value()) << listed.error().describe();
  ASSERT_EQ(listed->size(), 2U);
  for (const EntryInfo& e : *listed) {
    EXPECT_EQ(e.pinned, e.key == a.passport.key) << e.key.hex();
  }
}

}  // namespace
}  // namespace kcache
