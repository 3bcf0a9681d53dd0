// bench_eviction_trace: total rebuild time of a replayed trace of mixed
// kernels under one size cap, with eviction_policy = cost against lru
// (issue 21). The kernels carry real recorded NVRTC compile times and cubin
// sizes of the bench corpus (trivial, medium, heavy_cub: see
// tests/support/eviction_trace.hpp); payload bytes are synthetic.
//
//   build/ci/bench/bench_eviction_trace record [N]   # compile each corpus kernel N times (default 4)
//                                                    # with NVRTC, print the JSON of
//                                                    # bench/data/nvrtc_compile_costs.json
//   build/ci/bench/bench_eviction_trace              # replay (lru, then cost) on tmpfs or $KCACHE_BENCH_DIR
//
// Environment: KCACHE_BENCH_COSTS (default bench/data/nvrtc_compile_costs.json),
// KCACHE_BENCH_KERNELS (default 4000), KCACHE_BENCH_REQUESTS (default 80000),
// KCACHE_BENCH_CAP_PERCENT (cap as a percentage of the catalogue's bytes, default 25),
// KCACHE_BENCH_ZIPF (default 0.8).
//
// Counters per policy: rebuild_s (every miss), warm_rebuild_s (misses after a
// kernel's first request: what the policy decides), misses, heavy_misses (of
// heavy_cub kernels after their first), hit_ratio, put_us (mean wall time of
// a put at the cap), and for cost the ratios lru / cost.
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compile/backends.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "support/eviction_trace.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compiles each corpus kernel `n` times (distinct variants, so nothing is
// reused inside NVRTC) and prints the recorded compiles as JSON.
int record(int n) {
  const fs::path cuda_include = kcache::Toolkit::instance().cuda_home() / "include";
  nlohmann::json compiles = nlohmann::json::array();
  for (const std::string kind : {"trivial", "medium", "heavy_cub"}) {
    for (int v = 0; v < n; ++v) {
      kcache::CompileRequest r;
      r.backend = "nvrtc";
      r.target_kind = "cubin";
      r.name = kind + ".cu";
      r.source = read_text(fs::path(KCACHE_SOURCE_DIR) / "bench" / "corpus" / (kind + ".cu")) + "\n// variant " +
                 std::to_string(v) + "\n";
      r.options = {"-arch=sm_90", "-DKCACHE_BENCH_VARIANT=" + std::to_string(v)};
      if (kind == "heavy_cub") {
        r.options.push_back("-I" + (cuda_include / "cccl").string());
        r.options.push_back("-I" + cuda_include.string());
      }
      auto canon = kcache::canonicalize_nvrtc_options(r.options);
      if (!canon) {
        std::fprintf(stderr, "%s\n", canon.error().describe().c_str());
        return 1;
      }
      const auto t = Clock::now();
      auto out = kcache::jit::run_nvrtc(r, canon->options);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count();
      if (!out) {
        std::fprintf(stderr, "%s\n%s\n", out.error().describe().c_str(), out.error().log.c_str());
        return 1;
      }
      std::fprintf(stderr, "%s variant %d: %lld us, %zu bytes\n", kind.c_str(), v, static_cast<long long>(us),
                   out->payload.size());
      compiles.push_back({{"kind", kind}, {"variant", v}, {"compile_us", us}, {"cubin_bytes", out->payload.size()}});
    }
  }
  nlohmann::json j{{"what", "NVRTC compile times (wall, in process, library already loaded after the first) and "
                            "cubin sizes of bench/corpus for -arch=sm_90, recorded by `bench_eviction_trace record`"},
                   {"compiles", compiles}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

std::vector<kcache::test::RecordedCompile>& recorded() {
  static std::vector<kcache::test::RecordedCompile> r = kcache::test::load_recorded_compiles(
      env_or("KCACHE_BENCH_COSTS", std::string(KCACHE_SOURCE_DIR) + "/bench/data/nvrtc_compile_costs.json"));
  return r;
}

fs::path bench_base() {
  const std::string base = env_or("KCACHE_BENCH_DIR", fs::exists("/dev/shm") ? "/dev/shm" : env_or("TMPDIR", "/tmp"));
  return fs::path(base) / ("kcache-bench-eviction-" + std::to_string(::getpid()));
}

std::map<std::string, double> g_warm_rebuild_s;  // per policy, for the ratio

void BM_EvictionTrace(benchmark::State& state) {
  const auto policy = state.range(0) == 0 ? kcache::EvictionPolicy::lru : kcache::EvictionPolicy::cost;
  const auto sizes = state.range(1) == 0 ? kcache::test::TraceSizes::recorded : kcache::test::TraceSizes::shuffled;
  const std::string name = std::string(sizes == kcache::test::TraceSizes::recorded ? "recorded/" : "shuffled/") +
                           (policy == kcache::EvictionPolicy::lru ? "lru" : "cost");
  const std::string lru_name = name.substr(0, name.find('/') + 1) + "lru";
  if (recorded().empty()) {
    state.SkipWithError("no recorded compiles (KCACHE_BENCH_COSTS)");
    return;
  }
  const auto kernels = static_cast<std::size_t>(std::stoul(env_or("KCACHE_BENCH_KERNELS", "4000")));
  const auto requests = static_cast<std::size_t>(std::stoul(env_or("KCACHE_BENCH_REQUESTS", "80000")));
  const double cap_percent = std::stod(env_or("KCACHE_BENCH_CAP_PERCENT", "25"));
  const double zipf = std::stod(env_or("KCACHE_BENCH_ZIPF", "0.8"));
  const auto trace = kcache::test::make_trace(recorded(), kernels, requests, zipf, 21, sizes);
  kcache::test::ReplayResult r;
  double put_wall_s = 0;
  for (auto _ : state) {
    const fs::path root = bench_base() / (name.substr(0, name.find('/')) + "-" + name.substr(name.find('/') + 1));
    fs::remove_all(root);
    kcache::FileStoreOptions o;
    o.root = root;
    o.fsync = kcache::FsyncPolicy::none;
    o.touch_interval = std::chrono::seconds(0);  // every hit is a use (the trace runs in seconds, not days)
    o.eviction_policy = policy;
    // Cap: a share of the catalogue's bytes (payload + a passport each); the
    // same for both policies (the metadata, which grows with the entries, is under it too).
    const std::uint64_t pass_bytes = kcache::test::trace_artifact(trace.kernels[0]).passport.to_json().size();
    o.max_size_bytes = static_cast<std::uint64_t>(
        static_cast<double>(trace.catalogue_bytes + kernels * pass_bytes) * cap_percent / 100.0);
    auto store = kcache::FileStore::open(o);
    if (!store) {
      state.SkipWithError(store.error().describe().c_str());
      return;
    }
    const auto t0 = Clock::now();
    r = kcache::test::replay(**store, trace);
    put_wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto s = (*store)->stats();
    state.counters["size_over_cap"] = static_cast<double>(s->size_bytes + s->metadata_bytes) /
                                      static_cast<double>(o.max_size_bytes);
    state.counters["evictions"] = static_cast<double>(s->evictions);
    fs::remove_all(root);
  }
  fs::remove_all(bench_base());
  state.counters["rebuild_s"] = static_cast<double>(r.rebuild_us) / 1e6;
  state.counters["warm_rebuild_s"] = static_cast<double>(r.warm_rebuild_us()) / 1e6;
  state.counters["misses"] = static_cast<double>(r.misses);
  state.counters["cold_misses"] = static_cast<double>(r.cold_misses);
  state.counters["heavy_misses"] = static_cast<double>(r.heavy_misses);
  state.counters["hit_ratio"] = 1.0 - static_cast<double>(r.misses) / static_cast<double>(r.requests);
  state.counters["errors"] = static_cast<double>(r.errors);
  state.counters["replay_s"] = put_wall_s;
  g_warm_rebuild_s[name] = static_cast<double>(r.warm_rebuild_us()) / 1e6;
  g_warm_rebuild_s[name + "_all"] = static_cast<double>(r.rebuild_us) / 1e6;
  if (policy == kcache::EvictionPolicy::cost && g_warm_rebuild_s.count(lru_name) != 0 && g_warm_rebuild_s[name] > 0) {
    state.counters["lru_over_cost_warm"] = g_warm_rebuild_s[lru_name] / g_warm_rebuild_s[name];
    state.counters["lru_over_cost_all"] = g_warm_rebuild_s[lru_name + "_all"] / g_warm_rebuild_s[name + "_all"];
  }
}

// Args: policy (0 lru, 1 cost), sizes (0 recorded, 1 shuffled).
BENCHMARK(BM_EvictionTrace)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "record") {
    return record(argc >= 3 ? std::atoi(argv[2]) : 4);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
