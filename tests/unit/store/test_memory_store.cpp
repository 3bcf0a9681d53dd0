#include "kcache/memory_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "kcache/key_builder.hpp"

using kcache::Artifact;
using kcache::ErrorCode;
using kcache::KeyBuilder;
using kcache::MemoryStore;
using kcache::PutOutcome;

namespace {

Artifact blob(const std::string& name, std::size_t size, char fill = 'x');

// A hit shares the stored bytes (no copy of the payload), and the caller keeps
// them after the entry is evicted; the caller's own artifact is untouched by
// anything done to the store's.
TEST(MemoryStore, AHitSharesThePayloadAndItOutlivesEviction) {
  MemoryStore store(300 << 10);
  const Artifact a = blob("big", 200 << 10, 'b');
  ASSERT_TRUE(store.put(a).has_value());
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_TRUE((*got)->payload.shares_with(a.payload));
  auto again = store.get(a.passport.key);
  EXPECT_TRUE((*again)->payload.shares_with((*got)->payload));
  ASSERT_TRUE(store.put(blob("other", 200 << 10, 'o')).has_value());  // evicts "big"
  EXPECT_FALSE(store.get(a.passport.key)->has_value());
  EXPECT_EQ((*got)->payload, std::string(200 << 10, 'b'));
  EXPECT_TRUE((*got)->verify().has_value());
}

// get_shared() hands out the stored artifact itself (no copy of its passport),
// counted like get(); the caller keeps it after eviction; a miss is null.
TEST(MemoryStore, GetSharedReturnsTheStoredArtifactItselfAndCountsLikeGet) {
  MemoryStore store(300 << 10);
  const Artifact a = blob("big", 200 << 10, 'b');
  ASSERT_TRUE(store.put(a).has_value());
  auto first = store.get_shared(a.passport.key);
  auto second = store.get_shared(a.passport.key);
  ASSERT_TRUE(first && *first && second && *second);
  EXPECT_EQ(first->get(), second->get());  // one object
  EXPECT_EQ(**first, a);
  EXPECT_EQ(store.stats()->hits, 2U);
  auto missing = store.get_shared(blob("absent", 10).passport.key);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, nullptr);
  EXPECT_EQ(store.stats()->misses, 1U);
  ASSERT_TRUE(store.put(blob("other", 200 << 10, 'o')).has_value());  // evicts "big"
  EXPECT_FALSE(store.get(a.passport.key)->has_value());
  EXPECT_EQ(**first, a);
  EXPECT_TRUE((*first)->verify().has_value());
}

Artifact blob(const std::string& name, std::size_t size, char fill) {
  return Artifact::make(KeyBuilder("test").add("name", name), "blob", std::string(size, fill));
}

}  // namespace

TEST(MemoryStore, PutThenGetReturnsTheSameArtifact) {
  MemoryStore store(1 << 20);
  Artifact a = blob("a", 1000, 'a');
  a.passport.compile_duration_us = 1234;
  ASSERT_EQ(store.put(a).value(), PutOutcome::stored);
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, a);
  auto s = store.stats().value();
  EXPECT_EQ(s.hits, 1U);
  EXPECT_EQ(s.misses, 0U);
  EXPECT_EQ(s.puts, 1U);
  EXPECT_EQ(s.entries, 1U);
  EXPECT_EQ(s.size_bytes, 1000U);
  EXPECT_EQ(s.max_size_bytes, 1U << 20);
  EXPECT_EQ(s.compile_us_saved, 1234U);
  EXPECT_EQ(s.bytes_read, 1000U);
}

TEST(MemoryStore, UnknownKeyIsAMissNotAnError) {
  MemoryStore store(1 << 20);
  auto got = store.get(blob("nothing", 1).passport.key);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store.stats()->misses, 1U);
}

TEST(MemoryStore, SecondPutOfAKeyIsAlreadyPresent) {
  MemoryStore store(1 << 20);
  const Artifact a = blob("a", 10);
  EXPECT_EQ(store.put(a).value(), PutOutcome::stored);
  EXPECT_EQ(store.put(a).value(), PutOutcome::already_present);
  EXPECT_EQ(store.stats()->puts, 1U);
  EXPECT_EQ(store.stats()->entries, 1U);
}

TEST(MemoryStore, PutRejectsAnArtifactThatDoesNotMatchItsPassport) {
  MemoryStore store(1 << 20);
  Artifact a = blob("a", 100);
  std::string bytes(a.payload);
  bytes[50] ^= 1;
  a.payload = std::move(bytes);
  auto put = store.put(a);
  ASSERT_FALSE(put.has_value());
  EXPECT_EQ(put.error().code, ErrorCode::corrupt);
  EXPECT_FALSE(store.get(a.passport.key)->has_value());
  EXPECT_EQ(store.stats()->entries, 0U);
}

TEST(MemoryStore, EvictsLeastRecentlyUsedToStayUnderTheCap) {
  MemoryStore store(3000);
  const Artifact a = blob("a", 1000);
  const Artifact b = blob("b", 1000);
  const Artifact c = blob("c", 1000);
  const Artifact d = blob("d", 1000);
  ASSERT_TRUE(store.put(a));
  ASSERT_TRUE(store.put(b));
  ASSERT_TRUE(store.put(c));
  // Touch `a` so that `b` is now the least recently used.
  ASSERT_TRUE(store.get(a.passport.key)->has_value());
  ASSERT_TRUE(store.put(d));
  EXPECT_TRUE(store.get(a.passport.key)->has_value());
  EXPECT_FALSE(store.get(b.passport.key)->has_value());
  EXPECT_TRUE(store.get(c.passport.key)->has_value());
  EXPECT_TRUE(store.get(d.passport.key)->has_value());
  const auto s = store.stats().value();
  EXPECT_EQ(s.evictions, 1U);
  EXPECT_EQ(s.entries, 3U);
  EXPECT_EQ(s.size_bytes, 3000U);
}

TEST(MemoryStore, ArtifactLargerThanTheCapIsNotKeptAndEvictsNothingElse) {
  MemoryStore store(1000);
  const Artifact small = blob("small", 600);
  const Artifact huge = blob("huge", 1001);
  ASSERT_TRUE(store.put(small));
  EXPECT_EQ(store.put(huge).value(), PutOutcome::stored);
  EXPECT_FALSE(store.get(huge.passport.key)->has_value());
  EXPECT_TRUE(store.get(small.passport.key)->has_value());
  EXPECT_EQ(store.stats()->evictions, 1U);
  EXPECT_EQ(store.stats()->size_bytes, 600U);
}

TEST(MemoryStore, ZeroCapHoldsNothing) {
  MemoryStore store(0);
  const Artifact a = blob("a", 1);
  ASSERT_TRUE(store.put(a));
  EXPECT_FALSE(store.get(a.passport.key)->has_value());
  EXPECT_EQ(store.stats()->entries, 0U);
}

TEST(MemoryStore, RemoveDropsTheEntryAndItsBytes) {
  MemoryStore store(1 << 20);
  const Artifact a = blob("a", 100);
  ASSERT_TRUE(store.put(a));
  EXPECT_TRUE(store.remove(a.passport.key).value());
  EXPECT_FALSE(store.remove(a.passport.key).value());
  EXPECT_FALSE(store.get(a.passport.key)->has_value());
  EXPECT_EQ(store.stats()->size_bytes, 0U);
  EXPECT_EQ(store.stats()->entries, 0U);
}

TEST(MemoryStore, ListReportsEveryEntryMostRecentlyUsedFirst) {
  MemoryStore store(1 << 20);
  const Artifact a = blob("a", 10);
  const Artifact b = blob("b", 20);
  ASSERT_TRUE(store.put(a));
  ASSERT_TRUE(store.put(b));
  ASSERT_TRUE(store.get(a.passport.key)->has_value());
  const auto entries = store.list().value();
  ASSERT_EQ(entries.size(), 2U);
  EXPECT_EQ(entries[0].key, a.passport.key);
  EXPECT_EQ(entries[0].payload_size, 10U);
  EXPECT_EQ(entries[0].kind, "blob");
  EXPECT_GT(entries[0].last_used_unix_ms, 0);
  EXPECT_EQ(entries[1].key, b.passport.key);
}

// Threads put and get overlapping keys under a small cap: every hit must be
// the exact artifact for its key, and the byte count must stay under the cap.
TEST(MemoryStore, ConcurrentPutsAndGetsNeverReturnWrongBytesAndKeepTheCap) {
  constexpr int k_threads = 8;
  constexpr int k_keys = 64;
  constexpr int k_rounds = 400;
  constexpr std::uint64_t k_cap = 16 * 1024;
  std::vector<Artifact> artifacts;
  for (int i = 0; i < k_keys; ++i) {
    artifacts.push_back(blob("k" + std::to_string(i), 512 + static_cast<std::size_t>(i) * 7,
                             static_cast<char>('a' + i % 26)));
  }
  MemoryStore store(k_cap);
  std::vector<int> wrong(k_threads, 0);
  std::vector<int> hits(k_threads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < k_rounds; ++r) {
        const Artifact& a = artifacts[static_cast<std::size_t>((r * 7 + t * 13) % k_keys)];
        if (r % 3 == 0) {
          (void)store.put(a);
        } else if (auto got = store.get(a.passport.key); got && got->has_value()) {
          ++hits[static_cast<std::size_t>(t)];
          if (**got != a) {
            ++wrong[static_cast<std::size_t>(t)];
          }
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  int total_hits = 0;
  for (int t = 0; t < k_threads; ++t) {
    EXPECT_EQ(wrong[static_cast<std::size_t>(t)], 0);
    total_hits += hits[static_cast<std::size_t>(t)];
  }
  const auto s = store.stats().value();
  EXPECT_LE(s.size_bytes, k_cap);
  EXPECT_EQ(s.hits, static_cast<std::uint64_t>(total_hits));
  EXPECT_GT(s.evictions, 0U);
  std::uint64_t listed = 0;
  const auto entries = store.list().value();
  for (const auto& e : entries) {
    listed += e.payload_size;
  }
  EXPECT_EQ(listed, s.size_bytes);
  std::printf("[ figures ] %d threads x %d ops: hits=%d wrong=0 evictions=%llu size=%llu/%llu\n", k_threads,
              k_rounds, total_hits, static_cast<unsigned long long>(s.evictions),
              static_cast<unsigned long long>(s.size_bytes), static_cast<unsigned long long>(k_cap));
}

// fill() is for artifacts a lower tier has just verified: it may skip the
// SHA-256, but still refuses a malformed passport or a size mismatch.
TEST(MemoryStore, FillStoresAVerifiedArtifactAndKeepsTheShapeChecks) {
  MemoryStore store(1 << 20);
  const Artifact a = blob("fill", 1000);
  auto filled = store.fill(a);
  ASSERT_TRUE(filled.has_value()) << filled.error().describe();
  EXPECT_EQ(*filled, PutOutcome::stored);
  auto got = store.get(a.passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
  EXPECT_EQ(**got, a);

  Artifact shorter = blob("short", 1000);
  shorter.payload = kcache::Payload(shorter.payload.view().substr(0, shorter.payload.size() - 1));
  auto r1 = store.fill(shorter);
  ASSERT_FALSE(r1.has_value());
  EXPECT_EQ(r1.error().code, ErrorCode::corrupt);
  Artifact bad_kind = blob("kind", 10);
  bad_kind.passport.kind = "Not A Kind";
  EXPECT_FALSE(store.fill(bad_kind).has_value());
  EXPECT_FALSE(store.get(shorter.passport.key)->has_value());
}
