// Requests counted by how they ended (kcache/request_stats.hpp), through the
// library routes: Cache::get_or_compile and kcache::compile, in real processes
// over one cache directory, with real NVRTC compiles.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/config.hpp"
#include "kcache/request_stats.hpp"
#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class CacheRequests : public ::testing::Test {
 protected:
  // The stores a program opens for `cache()` (memory in front of the disk).
  std::unique_ptr<Store> open_store() {
    auto config = Config::load({{"cache_dir", cache().string()}});
    EXPECT_TRUE(config) << config.error().describe();
    auto store = open_configured_store(*config);
    EXPECT_TRUE(store) << store.error().describe();
    return std::move(*store);
  }
  fs::path cache() const { return m_dir.path() / "cache"; }

  // The counts of `route` in the cache directory.
  RequestCounts counts(const std::string& route) {
    const auto stats = RequestStats::open_existing(cache());
    if (stats == nullptr) {
      return {};
    }
    for (const auto& r : stats->routes()) {
      if (r.route == route) {
        return r.counts;
      }
    }
    return {};
  }

  // Runs `fn` in a new process (a new "run" of a program); returns its exit status as words.
  static std::string in_child(const std::function<int()>& fn) {
    return test::describe_status(test::wait_child(test::fork_child(fn)));
  }

  test::TempDir m_dir;
};

TEST_F(CacheRequests, OneColdAndThreeWarmRunsAreThreeServedAndOneCompiled) {
  KCACHE_REQUIRE_NVRTC();
  const CompileRequest request = test::kernel_request("requests_cache");
  for (int run = 0; run < 4; ++run) {
    EXPECT_EQ(in_child([&] {
                auto store = open_store();
                CacheOptions options;
                options.lock_dir = cache() / "v1" / "locks";
                Cache jit(*store, options);
                CacheOutcome outcome{};
                auto a = jit.get_or_compile(request, &outcome);
                const bool want_hit = run > 0;
                return a && (outcome == CacheOutcome::hit) == want_hit ? 0 : 1;
              }),
              "exit 0")
        << "run " << run;
  }
  const RequestCounts c = counts("library");
  EXPECT_EQ(c.total(), 4U);
  EXPECT_EQ(c.served_total(), 3U);
  EXPECT_EQ(c.served[static_cast<unsigned>(Tier::disk)], 3U);
  EXPECT_EQ(c.compiled, 1U);
  EXPECT_EQ(c.failed + c.uncached, 0U);
  EXPECT_GT(c.compile_us, 0U);
  EXPECT_GE(c.compile_us_saved, 3 * c.compile_us / 2);  // each hit saved the recorded compile (about c.compile_us)
}

TEST_F(CacheRequests, KcacheCompileCountsTooAndASecondAskInAProcessIsServedFromMemory) {
  KCACHE_REQUIRE_NVRTC();
  const CompileRequest request = test::kernel_request("requests_compile");
  for (int run = 0; run < 4; ++run) {
    EXPECT_EQ(in_child([&] {
                auto store = open_store();
                CompileInfo info;
                auto a = compile(request, store.get(), &info);
                if (!a || info.hit != (run > 0)) {
                  return 1;
                }
                if (run == 3) {  // the same again in this process: the memory tier has it
                  auto b = compile(request, store.get(), &info);
                  return b && info.hit ? 0 : 2;
                }
                return 0;
              }),
              "exit 0")
        << "run " << run;
  }
  const RequestCounts c = counts("library");
  EXPECT_EQ(c.total(), 5U);
  EXPECT_EQ(c.compiled, 1U);
  EXPECT_EQ(c.served[static_cast<unsigned>(Tier::disk)], 3U);
  EXPECT_EQ(c.served[static_cast<unsigned>(Tier::memory)], 1U);
}

TEST_F(CacheRequests, FailuresRoutesAndCachesThatCountNothing) {
  auto store = open_store();
  CacheOptions triton;
  triton.route = "triton";
  Cache jit(*store, triton);
  const Key key = KeyBuilder("test").add("k", "failing").key();
  auto failed = jit.get_or_compile(key, [] { return Result<CompileOutput>(make_error(ErrorCode::compile_failed, "no")); });
  ASSERT_FALSE(failed);
  ASSERT_TRUE(Cache::last_request());
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::failed);
  // A producer that answers `unsupported` made its result without the cache: uncached, not failed.
  auto elsewhere = jit.get_or_compile(
      key, [] { return Result<CompileOutput>(make_error(ErrorCode::unsupported, "compiled, not stored")); });
  ASSERT_FALSE(elsewhere);
  EXPECT_EQ(elsewhere.error().code, ErrorCode::unsupported);
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::uncached);
  // A per-call route wins over the cache's.
  const Key good = KeyBuilder("test").add("k", "good").key();
  auto made = [&] {
    return Result<CompileOutput>(CompileOutput{Artifact::make(KeyBuilder("test").add("k", "good"), "blob", "bytes",
                                                              {"test", "1"}),
                                               true});
  };
  ASSERT_TRUE(jit.get_or_compile(good, made, nullptr, "jax"));
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::compiled);
  ASSERT_TRUE(jit.get_or_compile(good, made, nullptr, "jax"));
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::served);
  EXPECT_EQ(Cache::last_request()->tier, Tier::memory);  // this process put it
  // A cache told to count nothing (the `kcache run` stand-in counts itself) says what happened all the same.
  CacheOptions counts_nothing;
  counts_nothing.count_requests = false;
  Cache quiet(*store, counts_nothing);
  ASSERT_TRUE(quiet.get_or_compile(good, made));
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::served);
  EXPECT_EQ(counts("triton").failed, 1U);
  EXPECT_EQ(counts("triton").uncached, 1U);
  EXPECT_EQ(counts("triton").total(), 2U);
  EXPECT_EQ(counts("jax").compiled, 1U);
  EXPECT_EQ(counts("jax").served[static_cast<unsigned>(Tier::memory)], 1U);
  EXPECT_EQ(counts("library").total(), 0U);
}

}  // namespace
}  // namespace kcache
