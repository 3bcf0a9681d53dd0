// bench_compile: cold compile, warm hit through the file store, kcache's
// overhead on a cold compile (write-behind puts, and sync puts as the
// baseline), and key derivation vs raw SHA-256.
//
//   build/ci/bench/bench_compile --benchmark_min_time=0.2
//   build/ci/bench/bench_compile --benchmark_filter='Cold'
//   KCACHE_BENCH_COMPILE_DIR=/tmp/kb build/ci/bench/bench_compile --benchmark_filter=WarmHit
//     (then the same under `valgrind --tool=callgrind`: the entries are warm)
//
// docs/performance.md records the figures ("In-process hits", "Misses and cold compiles").
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kcache/compiler.hpp"
#include "kcache/config.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/write_behind_store.hpp"
#include "util/sha256.hpp"

namespace {

namespace fs = std::filesystem;

std::string corpus(const std::string& name) {
  std::ifstream in(std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

kcache::CompileRequest request_for(int which) {
  static const char* names[] = {"trivial.cu", "medium.cu", "heavy_cub.cu"};
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.name = names[which];
  r.source = corpus(names[which]);
  r.target_kind = "cubin";
  r.options = {"-arch=sm_90"};
  if (which == 2) {
    const auto home = kcache::Toolkit::instance().cuda_home();
    r.options.push_back("-I" + (home / "include" / "cccl").string());
    r.options.push_back("-I" + (home / "include").string());
  }
  return r;
}

// KCACHE_BENCH_COMPILE_DIR: a directory kept between runs (a second run, under
// callgrind say, then finds its warm entries and compiles nothing); else a new
// one per process under $TMPDIR.
fs::path bench_dir() {
  if (const char* kept = std::getenv("KCACHE_BENCH_COMPILE_DIR"); kept != nullptr && *kept != '\0') {
    fs::create_directories(kept);
    return kept;
  }
  const char* tmp = std::getenv("TMPDIR");
  auto d = fs::path(tmp != nullptr ? tmp : "/tmp") / ("kcache-bench-compile-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void BM_ColdCompile(benchmark::State& state) {
  const auto r = request_for(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto a = kcache::compile_uncached(r);
    if (!a) {
      state.SkipWithError(a.error().describe().c_str());
      return;
    }
    benchmark::DoNotOptimize(a->payload.data());
  }
}

void BM_WarmHitFileStore(benchmark::State& state) {
  const auto r = request_for(static_cast<int>(state.range(0)));
  kcache::FileStoreOptions o;
  o.root = bench_dir() / ("hit" + std::to_string(state.range(0)));
  auto store = kcache::FileStore::open(o);
  if (!store || !kcache::compile(r, store->get())) {
    state.SkipWithError("cannot prepare the store");
    return;
  }
  for (auto _ : state) {
    kcache::CompileInfo info;
    auto a = kcache::compile(r, store->get(), &info);
    if (!a || !info.hit) {
      state.SkipWithError("not a hit");
      return;
    }
    benchmark::DoNotOptimize(a->payload.data());
  }
}

// What kcache adds to a miss, as the caller sees it: key derivation + lookup +
// put (CompileInfo's key_us + lookup_us + store_us, measured per miss), through
// the store a program gets by default (open_configured_store: memory in front
// of the FileStore, fsync = file) with `put` = `mode`. With background puts the
// disk write happens on the store's thread: `bg_put_us` is its time per miss
// (not waited for by the caller) and `total_pct` adds it to the overhead, so
// the work is not hidden. Every miss has a fresh key (a new extra digest); the
// queue is flushed between iterations with the timer paused.
void cold_overhead(benchmark::State& state, kcache::PutMode mode) {
  auto r = request_for(static_cast<int>(state.range(0)));
  kcache::Config config;
  config.cache_dir = bench_dir() / ("cold" + std::to_string(state.range(0)) +
                                    (mode == kcache::PutMode::sync ? "-sync" : "-background"));
  config.put = mode;
  auto store = kcache::open_configured_store(config);
  if (!store) {
    state.SkipWithError(store.error().describe().c_str());
    return;
  }
  auto* behind = dynamic_cast<kcache::WriteBehindStore*>(store->get());
  double overhead_us = 0;
  double compile_us = 0;
  double store_us = 0;
  double store_us_max = 0;
  int miss = 0;
  for (auto _ : state) {
    state.PauseTiming();
    r.extra_digest = "cold-" + std::to_string(::getpid()) + "-" + std::to_string(miss++);
    state.ResumeTiming();
    kcache::CompileInfo info;
    auto a = kcache::compile(r, store->get(), &info);
    if (!a || info.hit || !info.stored) {
      state.SkipWithError(a ? "not a stored miss" : a.error().describe().c_str());
      return;
    }
    overhead_us += static_cast<double>(info.key_us + info.lookup_us + info.store_us);
    compile_us += static_cast<double>(info.compile_us);
    store_us += static_cast<double>(info.store_us);
    store_us_max = std::max(store_us_max, static_cast<double>(info.store_us));
    state.PauseTiming();
    if (behind != nullptr && !behind->flush()) {
      state.SkipWithError("a background put failed");
      return;
    }
    state.ResumeTiming();
  }
  const double bg_put_us =
      behind != nullptr ? static_cast<double>(behind->write_behind_stats().background_put_us) : 0.0;
  state.counters["overhead_us"] = benchmark::Counter(overhead_us, benchmark::Counter::kAvgIterations);
  state.counters["store_us"] = benchmark::Counter(store_us, benchmark::Counter::kAvgIterations);
  state.counters["store_us_max"] = store_us_max;
  state.counters["bg_put_us"] = benchmark::Counter(bg_put_us, benchmark::Counter::kAvgIterations);
  state.counters["overhead_pct"] = 100.0 * overhead_us / std::max(1.0, compile_us);
  state.counters["total_pct"] = 100.0 * (overhead_us + bg_put_us) / std::max(1.0, compile_us);
}

// The default: write-behind puts.
void BM_ColdOverhead(benchmark::State& state) { cold_overhead(state, kcache::PutMode::background); }

// The baseline: `put = sync`, the caller waits for the fsynced publish.
void BM_ColdOverheadSyncPut(benchmark::State& state) { cold_overhead(state, kcache::PutMode::sync); }

void BM_DeriveKey(benchmark::State& state) {
  auto r = request_for(0);
  r.source.assign(static_cast<std::size_t>(state.range(0)), 'x');
  for (auto _ : state) {
    auto k = kcache::derive_key(r);
    benchmark::DoNotOptimize(k);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// The same on real kernel text (the medium corpus kernel, which includes no
// header, repeated to the size): comments, literals and directives to scan.
std::string kernel_text_of_size(std::size_t size) {
  const std::string unit = corpus("medium.cu");
  std::string text;
  while (text.size() < size) {
    text += unit;
  }
  text.resize(size);
  return text;
}

void BM_DeriveKeyKernelText(benchmark::State& state) {
  auto r = request_for(1);
  r.source = kernel_text_of_size(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto k = kcache::derive_key(r);
    benchmark::DoNotOptimize(k);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_RawSha256(benchmark::State& state) {
  const std::string bytes(static_cast<std::size_t>(state.range(0)), 'x');
  for (auto _ : state) {
    benchmark::DoNotOptimize(kcache::util::sha256(bytes));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(BM_ColdCompile)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_WarmHitFileStore)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ColdOverheadSyncPut)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_ColdOverhead)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_DeriveKey)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_DeriveKeyKernelText)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_RawSha256)->Arg(1 << 16)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
