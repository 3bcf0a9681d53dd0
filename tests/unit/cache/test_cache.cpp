// Cache::get_or_compile with a real MemoryStore and threads. The cross-process
// tests (C05, C06) with real NVRTC compiles and a FileStore are in
// test_cache_processes.cpp.
#include "kcache/cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kcache/key_builder.hpp"
#include "kcache/memory_store.hpp"
#include "support/temp_dir.hpp"

using kcache::Artifact;
using kcache::Cache;
using kcache::CacheOptions;
using kcache::CacheOutcome;
using kcache::CompileOutput;
using kcache::ErrorCode;
using kcache::KeyBuilder;
using kcache::MemoryStore;
using kcache::Result;
using namespace std::chrono_literals;

namespace {

KeyBuilder builder(const std::string& name) { return KeyBuilder("test").add("name", name); }

// A producer whose output is a function of its key (self-checking payload).
Result<CompileOutput> produce(const std::string& name) {
  std::string payload = "payload of " + name;
  payload.append(1000, static_cast<char>(name.size()));
  return CompileOutput{Artifact::make(builder(name), "blob", payload), true};
}

}  // namespace

TEST(Cache, MissCompilesPublishesAndTheNextCallHits) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("a").key();
  int compiles = 0;
  auto fn = [&] { ++compiles; return produce("a"); };
  CacheOutcome first{};
  CacheOutcome second{};
  auto a = cache.get_or_compile(key, fn, &first);
  auto b = cache.get_or_compile(key, fn, &second);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(first, CacheOutcome::compiled);
  EXPECT_EQ(second, CacheOutcome::hit);
  EXPECT_EQ(a->payload, b->payload);
  EXPECT_EQ(cache.stats().compiles, 1U);
  EXPECT_EQ(cache.stats().hits, 1U);
}

// get_or_compile_shared: a warm hit from the memory tier is the tier's own
// artifact (no copy); get_or_compile hands out a copy of its own, equal to
// it, and a compiled result (no other owner) whole.
TEST(Cache, SharedHitsAreTheMemoryTiersArtifactAndValueResultsAreTheCallersOwn) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("s").key();
  int compiles = 0;
  auto fn = [&] { ++compiles; return produce("s"); };
  CacheOutcome outcome{};
  auto compiled = cache.get_or_compile_shared(key, fn, &outcome);
  ASSERT_TRUE(compiled && *compiled);
  EXPECT_EQ(outcome, CacheOutcome::compiled);
  auto first = cache.get_or_compile_shared(key, fn, &outcome);
  auto second = cache.get_or_compile_shared(key, fn, &outcome);
  ASSERT_TRUE(first && *first && second && *second);
  EXPECT_EQ(outcome, CacheOutcome::hit);
  EXPECT_EQ(first->get(), second->get());  // the memory tier's own
  EXPECT_EQ(**first, **compiled);
  auto value = cache.get_or_compile(key, fn, &outcome);
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(*value, **first);
  EXPECT_TRUE((*first)->verify().has_value());  // the store's artifact is untouched by the copy
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(cache.stats().hits, 3U);
  // A fresh key through the value API: compiled, returned whole.
  auto other = cache.get_or_compile(builder("t").key(), [] { return produce("t"); });
  ASSERT_TRUE(other.has_value());
  EXPECT_TRUE(other->verify().has_value());
}

// TESTING C05 among threads: 16 threads ask for one cold key at once.
TEST(Cache, SixteenThreadsOnOneColdKeyCompileOnce) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("herd").key();
  std::atomic<int> compiles{0};
  std::atomic<bool> go{false};
  std::vector<std::string> payloads(16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {
        std::this_thread::yield();
      }
      auto a = cache.get_or_compile(key, [&] {
        ++compiles;
        std::this_thread::sleep_for(20ms);  // a compile takes a while
        return produce("herd");
      });
      ASSERT_TRUE(a.has_value());
      payloads[static_cast<std::size_t>(t)] = a->payload;
    });
  }
  go = true;
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(compiles.load(), 1);
  for (const auto& p : payloads) {
    EXPECT_EQ(p, payloads[0]);
  }
  EXPECT_EQ(cache.stats().hits, 15U);
}

// A holder whose compile fails releases the key; the waiters do not hang and
// each compiles itself (failures are not cached).
TEST(Cache, WaiterCompilesItselfWhenTheHolderFails) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("f").key();
  std::atomic<int> calls{0};
  std::atomic<bool> holder_in{false};
  std::thread holder([&] {
    auto r = cache.get_or_compile(key, [&]() -> Result<CompileOutput> {
      ++calls;
      holder_in = true;
      std::this_thread::sleep_for(30ms);
      return kcache::make_error(ErrorCode::compile_failed, "error: expected a ';'", "log text");
    });
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::compile_failed);
    EXPECT_EQ(r.error().log, "log text");
  });
  while (!holder_in.load()) {
    std::this_thread::yield();
  }
  CacheOutcome outcome{};
  auto r = cache.get_or_compile(key, [&] { ++calls; return produce("f"); }, &outcome);
  holder.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(outcome, CacheOutcome::compiled);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(cache.stats().compile_failures, 1U);
  EXPECT_GE(cache.stats().waits, 1U);
}

TEST(Cache, CompileDurationIsRecordedAndAHitReportsTheTimeSaved) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("d").key();
  auto first = cache.get_or_compile(key, [] {
    std::this_thread::sleep_for(5ms);
    return produce("d");
  });
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(first->passport.compile_duration_us, 5000U);
  auto second = cache.get_or_compile(key, [] { return produce("d"); });
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->passport.compile_duration_us, first->passport.compile_duration_us);
  EXPECT_EQ(cache.stats().compile_us_saved, first->passport.compile_duration_us);
  auto ss = store.stats();
  ASSERT_TRUE(ss.has_value());
}

TEST(Cache, ADurationTheCompilerMeasuredIsKept) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("m").key();
  auto a = cache.get_or_compile(key, [] {
    auto out = produce("m");
    out->artifact.passport.compile_duration_us = 777;
    return out;
  });
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->passport.compile_duration_us, 777U);
}

TEST(Cache, ArtifactForAnotherKeyIsAnInternalErrorAndNotStored) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("x").key();
  auto r = cache.get_or_compile(key, [] { return produce("y"); });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::internal);
  auto in_store = store.get(builder("y").key());
  ASSERT_TRUE(in_store.has_value());
  EXPECT_FALSE(in_store->has_value());
}

TEST(Cache, NotCacheableOutputIsReturnedButNotStored) {
  MemoryStore store(1 << 20);
  Cache cache(store);
  const auto key = builder("n").key();
  CacheOutcome outcome{};
  auto r = cache.get_or_compile(key, [] {
    auto out = produce("n");
    out->cacheable = false;
    return out;
  }, &outcome);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(outcome, CacheOutcome::compiled_only);
  auto in_store = store.get(key);
  ASSERT_TRUE(in_store.has_value());
  EXPECT_FALSE(in_store->has_value());
  EXPECT_EQ(cache.stats().not_cacheable, 1U);
}

// A lock directory that cannot be used never breaks the compile.
TEST(Cache, UnusableLockDirectoryStillCompiles) {
  kcache::test::TempDir dir;
  const auto not_a_dir = dir.path() / "file";
  { std::FILE* f = std::fopen(not_a_dir.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  MemoryStore store(1 << 20);
  CacheOptions options;
  options.lock_dir = not_a_dir / "locks";
  std::vector<std::string> warnings;
  options.warn = [&](const std::string& w) { warnings.push_back(w); };
  Cache cache(store, options);
  auto r = cache.get_or_compile(builder("l").key(), [] { return produce("l"); });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(cache.stats().lock_errors, 1U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("compiling without it"), std::string::npos);
}
