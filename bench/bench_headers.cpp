// bench_headers: what disk headers cost a hit.
//
//   BM_KeyNewProcess/N     derive_key for a kernel that reads N user headers
//                          from disk (N = 0: none), as a new process does it:
//                          the in-process memos are dropped before each call,
//                          so the header manifest comes from the cache
//                          directory and every file identity is re-checked.
//   BM_KeyInProcess/N      the same with the memos kept (a long-lived process).
//   BM_InProcessHit/K      compile() served from a MemoryStore for the corpus
//                          kernel K (0 trivial, 2 heavy_cub: CUB block
//                          primitives from the toolkit's CCCL), the figure to
//                          hold against cuda.core's in-memory program cache
//                          (scripts/bench-cuda-core-cache.py).
//
//   cmake --build --preset ci --target bench_headers
//   build/ci/bench/bench_headers --benchmark_min_time=0.3 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// docs/performance.md records the figures ("In-process hits"); their history:
// docs/history/performance-jit.md, "Header trees".
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "deps/header_scanner.hpp"
#include "kcache/compiler.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/toolkit.hpp"

namespace {

namespace fs = std::filesystem;

fs::path bench_dir() {
  static const fs::path d = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto p = fs::path(tmp != nullptr ? tmp : "/tmp") / ("kcache-bench-headers-" + std::to_string(::getpid()));
    fs::create_directories(p);
    kcache::Toolkit::instance().set_memo_dir(p / "cache" / "v1" / "toolkit");
    return p;
  }();
  return d;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// A kernel that includes `n` headers (20 directories, an umbrella header), as
// scripts/bench-header-hit.sh builds it.
kcache::CompileRequest tree_request(int n) {
  const fs::path root = bench_dir() / ("tree" + std::to_string(n));
  const fs::path inc = root / "inc";
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.name = (root / "k.cu").string();
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90"};
  const std::string kernel = "extern \"C\" __global__ void k(int* p) { p[threadIdx.x] += 1; }\n";
  if (n == 0) {
    r.source = kernel;
    return r;
  }
  if (!fs::exists(inc / "all.h")) {
    std::string all;
    const int per = (n + 19) / 20;
    for (int i = 0; i < n; ++i) {
      const int d = i / per;
      const int h = i % per;
      fs::create_directories(inc / ("m" + std::to_string(d)));
      write(inc / ("m" + std::to_string(d)) / ("h" + std::to_string(h) + ".h"),
            "#pragma once\n#include \"h" + std::to_string((h + 1) % per) + ".h\"\n__device__ inline int f_" +
                std::to_string(d) + "_" + std::to_string(h) + "(int x) { return x + " + std::to_string(h) + "; }\n");
      all += "#include <m" + std::to_string(d) + "/h" + std::to_string(h) + ".h>\n";
    }
    write(inc / "all.h", all);
    // Identities younger than two seconds are not trusted by the manifest.
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  }
  r.source = "#include <all.h>\n" + kernel;
  r.options.push_back("-I" + inc.string());
  return r;
}

void key_bench(benchmark::State& state, bool new_process) {
  const auto r = tree_request(static_cast<int>(state.range(0)));
  std::vector<kcache::HeaderDependency> headers;
  if (!kcache::derive_key(r, &headers)) {  // writes the manifest
    state.SkipWithError("cannot derive the key");
    return;
  }
  for (auto _ : state) {
    if (new_process) {
      kcache::jit::forget_scan_memos();
    }
    auto k = kcache::derive_key(r);
    benchmark::DoNotOptimize(k);
  }
  state.counters["disk_headers"] = static_cast<double>(headers.size());
}

void BM_KeyNewProcess(benchmark::State& state) { key_bench(state, true); }
void BM_KeyInProcess(benchmark::State& state) { key_bench(state, false); }

std::string corpus(const std::string& name) {
  std::ifstream in(std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

kcache::CompileRequest corpus_request(std::size_t which) {
  static const char* names[] = {"trivial.cu", "medium.cu", "heavy_cub.cu"};
  bench_dir();
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

// The key alone, in process (memos warm): the part of BM_InProcessHit that is not the store.
void BM_KeyCorpusInProcess(benchmark::State& state) {
  const auto r = corpus_request(static_cast<std::size_t>(state.range(0)));
  if (!kcache::derive_key(r)) {
    state.SkipWithError("cannot derive the key");
    return;
  }
  for (auto _ : state) {
    auto k = kcache::derive_key(r);
    benchmark::DoNotOptimize(k);
  }
}

void BM_InProcessHit(benchmark::State& state) {
  const auto r = corpus_request(static_cast<std::size_t>(state.range(0)));
  kcache::MemoryStore store(256u << 20);
  if (!kcache::compile(r, &store)) {
    state.SkipWithError("cannot compile");
    return;
  }
  for (auto _ : state) {
    kcache::CompileInfo info;
    auto a = kcache::compile(r, &store, &info);
    if (!a || !info.hit) {
      state.SkipWithError("not a hit");
      return;
    }
    benchmark::DoNotOptimize(a->payload.data());
  }
}

BENCHMARK(BM_KeyNewProcess)->Arg(0)->Arg(700)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KeyInProcess)->Arg(0)->Arg(700)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KeyCorpusInProcess)->Arg(0)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_InProcessHit)->Arg(0)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
