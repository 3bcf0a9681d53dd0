// compile_many over real `kcache worker` processes and real NVRTC compiles.
#include <gtest/gtest.h>

#include "kcache/cache.hpp"
#include "kcache/compiler.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/worker_pool.hpp"
#include "support/temp_dir.hpp"
#include "worker/compile_progress.hpp"
#include "unit/worker/worker_test_support.hpp"

using kcache::CompileRequest;
using kcache::ErrorCode;
using kcache::WorkerPool;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<WorkerPool> make_pool(const kcache::test::TempDir& dir, unsigned workers,
                                      std::vector<std::string> env = {}) {
  kcache::WorkerPoolOptions o;
  o.executable = KCACHE_CLI_PATH;
  o.workers = workers;
  env.push_back("KCACHE_DIR=" + dir.path().string());  // the toolkit memo goes here, not to ~/.cache
  o.environment = std::move(env);
  auto pool = WorkerPool::create(o);
  return pool ? std::move(*pool) : nullptr;
}

}  // namespace

TEST(CompileMany, ResultsComeBackInOrderAndMatchAnInProcessCompile) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  auto pool = make_pool(dir, 2);
  ASSERT_NE(pool, nullptr);
  std::vector<CompileRequest> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(kcache::test::kernel_request("k" + std::to_string(i), i));
  }
  std::size_t progress_calls = 0;
  auto results = pool->compile_many(requests, nullptr, [&](std::size_t done, std::size_t total, const CompileRequest&,
                                                           const kcache::Result<kcache::Artifact>&) {
    ++progress_calls;
    EXPECT_LE(done, total);
    EXPECT_EQ(total, 6U);
  });
  ASSERT_EQ(results.size(), requests.size());
  EXPECT_EQ(progress_calls, 6U);
  for (std::size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].has_value()) << i << ": " << results[i].error().describe();
    EXPECT_EQ(results[i]->passport.kind, "ptx");
    EXPECT_NE(results[i]->payload.find(".entry k" + std::to_string(i)), std::string::npos) << i;
    auto key = kcache::derive_key(requests[i]);
    ASSERT_TRUE(key.has_value());
    EXPECT_EQ(results[i]->passport.key, key->key());
    EXPECT_TRUE(results[i]->verify().has_value());
  }
  // Differential: the bytes a worker returns are the bytes of an in-process compile.
  auto local = kcache::compile_in_process(requests[2]);
  ASSERT_TRUE(local.has_value()) << local.error().describe();
  EXPECT_EQ(local->artifact.payload, results[2]->payload);
  EXPECT_EQ(local->artifact.passport.symbols, results[2]->passport.symbols);
}

TEST(CompileMany, IdenticalKeysInOneBatchCompileOnce) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  auto pool = make_pool(dir, 2);
  ASSERT_NE(pool, nullptr);
  auto a = kcache::test::kernel_request("dup_a");
  auto b = kcache::test::kernel_request("dup_b");
  CompileRequest a_spelled = a;
  a_spelled.options = {"--gpu-architecture", "compute_75"};  // same key, other spelling
  const std::vector<CompileRequest> requests = {a, b, a, a_spelled, b};
  auto results = pool->compile_many(requests);
  for (const auto& r : results) {
    ASSERT_TRUE(r.has_value()) << r.error().describe();
  }
  EXPECT_EQ(pool->stats().requests, 2U);
  EXPECT_EQ(pool->stats().deduplicated, 3U);
  EXPECT_EQ(results[0]->payload, results[2]->payload);
  EXPECT_EQ(results[0]->payload, results[3]->payload);
  EXPECT_EQ(results[1]->payload, results[4]->payload);
}

TEST(CompileMany, ACompileErrorFailsOnlyItsRequestWithTheLog) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  auto pool = make_pool(dir, 2);
  ASSERT_NE(pool, nullptr);
  auto bad = kcache::test::kernel_request("broken");
  bad.source = "extern \"C\" __global__ void broken() { this is not cuda; }";
  auto results = pool->compile_many({kcache::test::kernel_request("fine"), bad});
  ASSERT_TRUE(results[0].has_value());
  ASSERT_FALSE(results[1].has_value());
  EXPECT_EQ(results[1].error().code, ErrorCode::compile_failed);
  EXPECT_NE(results[1].error().log.find("error"), std::string::npos) << results[1].error().log;
  EXPECT_EQ(pool->stats().crashed, 0U);
}

TEST(CompileMany, ACrashingRequestFailsAloneAndIsNotCached) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  auto pool = make_pool(dir, 2, {"KCACHE_WORKER_FAULT=crash@victim.cu"});
  ASSERT_NE(pool, nullptr);
  kcache::MemoryStore store(64 << 20);
  kcache::Cache cache(store);
  auto victim = kcache::test::kernel_request("victim");
  auto results = pool->compile_many({kcache::test::kernel_request("v1"), victim, kcache::test::kernel_request("v2")},
                                    &cache);
  ASSERT_TRUE(results[0].has_value());
  ASSERT_FALSE(results[1].has_value());
  EXPECT_EQ(results[1].error().code, ErrorCode::worker_crashed);
  ASSERT_TRUE(results[2].has_value());
  auto victim_key = kcache::derive_key(victim);
  ASSERT_TRUE(victim_key.has_value());
  auto cached = store.get(victim_key->key());
  ASSERT_TRUE(cached.has_value());
  EXPECT_FALSE(cached->has_value());  // nothing cached for the failed request
  EXPECT_EQ(cache.stats().compiles, 3U);
}

TEST(CompileMany, ThroughACacheTheSecondBatchNeverReachesAWorker) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  auto pool = make_pool(dir, 2);
  ASSERT_NE(pool, nullptr);
  kcache::MemoryStore store(64 << 20);
  kcache::Cache cache(store);
  std::vector<CompileRequest> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(kcache::test::kernel_request("c" + std::to_string(i), i));
  }
  auto first = pool->compile_many(requests, &cache);
  const auto sent = pool->stats().requests;
  EXPECT_EQ(sent, 4U);
  auto second = pool->compile_many(requests, &cache);
  EXPECT_EQ(pool->stats().requests, sent);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(first[i].has_value());
    ASSERT_TRUE(second[i].has_value());
    EXPECT_EQ(first[i]->payload, second[i]->payload);
    EXPECT_GT(second[i]->passport.compile_duration_us, 0U);
  }
  EXPECT_EQ(cache.stats().hits, 4U);
  EXPECT_GT(cache.stats().compile_us_saved, 0U);
}

TEST(CompileProgress, PlainLinesNameEachRequestAndItsOutcome) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  auto print = kcache::worker::make_progress_printer(f, kcache::worker::ProgressStyle::lines);
  CompileRequest a;
  a.name = "a.cu";
  CompileRequest b;
  b.name = "b.cu";
  print(1, 2, a, kcache::Artifact{});
  print(2, 2, b, kcache::make_error(ErrorCode::compile_failed, "expected ';'"));
  std::rewind(f);
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n), "[1/2] ok a.cu\n[2/2] FAILED b.cu: compile_failed: expected ';'\n");
  std::FILE* not_a_tty = std::tmpfile();
  ASSERT_NE(not_a_tty, nullptr);
  EXPECT_EQ(kcache::worker::progress_style_for(not_a_tty), kcache::worker::ProgressStyle::lines);
  std::fclose(not_a_tty);
}
