// bench_compile: cold compile, warm hit through the file store, kcache's
// overhead on a cold compile, and key derivation vs raw SHA-256.
//
//   build/ci/bench/bench_compile --benchmark_min_time=0.2
//
// docs/performance-jit.md records the figures.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kcache/compiler.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
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

fs::path bench_dir() {
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

// What kcache adds to a miss: key derivation + lookup + put (measured per miss).
void BM_ColdOverhead(benchmark::State& state) {
  const auto r = request_for(static_cast<int>(state.range(0)));
  kcache::FileStoreOptions o;
  o.root = bench_dir() / ("cold" + std::to_string(state.range(0)));
  auto store = kcache::FileStore::open(o);
  double overhead_us = 0;
  double compile_us = 0;
  for (auto _ : state) {
    state.PauseTiming();
    (void)(*store)->clear();
    state.ResumeTiming();
    kcache::CompileInfo info;
    auto a = kcache::compile(r, store->get(), &info);
    if (!a) {
      state.SkipWithError(a.error().describe().c_str());
      return;
    }
    overhead_us += static_cast<double>(info.key_us + info.lookup_us + info.store_us);
    compile_us += static_cast<double>(info.compile_us);
  }
  state.counters["overhead_us"] = benchmark::Counter(overhead_us, benchmark::Counter::kAvgIterations);
  state.counters["overhead_pct"] = 100.0 * overhead_us / std::max(1.0, compile_us);
}

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
BENCHMARK(BM_ColdOverhead)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DeriveKey)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_DeriveKeyKernelText)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_RawSha256)->Arg(1 << 16)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
