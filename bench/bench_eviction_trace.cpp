// bench_eviction_trace: total rebuild time of a replayed trace of mixed
// kernels under one size cap, with eviction_policy = cost against lru
// (issue 21). The kernels carry real recorded NVRTC compile times and cubin
// sizes (tests/support/eviction_trace.hpp); payload bytes are synthetic. Two
// recorded data sets: the bench corpus (trivial, medium, heavy_cub; replayed
// in a 70/20/10 mix, with its own sizes and with sizes shuffled) and the
// kernel mix of bench/kernel_mix.hpp (header-heavy small kernels of CuPy,
// CCCL and libcu++, generated kernels and the corpus; every kind in the same
// share).
//
//   build/ci/bench/bench_eviction_trace record [N]      # compile each corpus kernel N times (default 4)
//                                                       # with NVRTC, print the JSON of
//                                                       # bench/data/nvrtc_compile_costs.json
//   KCACHE_BENCH_CUPY=$(scripts/fetch-cupy-headers.sh) build/ci/bench/bench_eviction_trace record-mix [N]
//                                                       # the same for every kind of the kernel mix:
//                                                       # bench/data/nvrtc_kernel_mix.json
//   build/ci/bench/bench_eviction_trace                 # replay (lru, then cost) on tmpfs or $KCACHE_BENCH_DIR
//   build/ci/bench/bench_eviction_trace dump-trace DATA # print the trace of DATA (0 corpus, 1 corpus with sizes
//                                                       # shuffled, 2 kernel mix) as JSON with its cap and exact
//                                                       # LRU totals, for bench/eviction_bound.py
//
// Environment: KCACHE_BENCH_COSTS (default bench/data/nvrtc_compile_costs.json),
// KCACHE_BENCH_MIX (default bench/data/nvrtc_kernel_mix.json),
// KCACHE_BENCH_KERNELS (default 4000), KCACHE_BENCH_REQUESTS (default 80000),
// KCACHE_BENCH_CAP_PERCENT (cap as a percentage of the catalogue's bytes, default 25),
// KCACHE_BENCH_ZIPF (default 0.8).
//
// Counters per policy: rebuild_s (every miss), warm_rebuild_s (misses after a
// kernel's first request: what the policy decides), misses, heavy_misses (of
// heavy_cub kernels after their first), slow_misses (of kernels of 1 s or
// more after their first), hit_ratio, replay_s, and for cost and gds the
// ratios lru / this policy (lru_over_this_warm, lru_over_this_all).
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compile/backends.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "kernel_mix.hpp"
#include "support/eviction_trace.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Compiles each kernel of `kinds` `n` times (distinct variants, so nothing
// is reused inside NVRTC), after one warm-up compile that loads NVRTC, and
// prints the recorded compiles as JSON.
int record(const std::vector<std::string>& kinds, int n) {
  const fs::path cuda_include = kcache::Toolkit::instance().cuda_home() / "include";
  const std::string cupy = env_or("KCACHE_BENCH_CUPY", "");
  nlohmann::json compiles = nlohmann::json::array();
  bool warm = false;
  for (const std::string& kind : kinds) {
    for (int v = warm ? 0 : -1; v < n; ++v) {
      auto r = kcache::bench::kernel_mix_request(kind, v < 0 ? 9999 : v, KCACHE_SOURCE_DIR, cuda_include, cupy);
      if (!r) {
        std::fprintf(stderr, "unknown kernel kind %s\n", kind.c_str());
        return 2;
      }
      auto canon = kcache::canonicalize_nvrtc_options(r->options);
      if (!canon) {
        std::fprintf(stderr, "%s\n", canon.error().describe().c_str());
        return 1;
      }
      const auto t = Clock::now();
      auto out = kcache::jit::run_nvrtc(*r, canon->options);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count();
      if (!out) {
        std::fprintf(stderr, "%s: %s\n%s\n", kind.c_str(), out.error().describe().c_str(), out.error().log.c_str());
        return 1;
      }
      if (v < 0) {
        warm = true;  // the warm-up: loads NVRTC, not recorded
        continue;
      }
      std::fprintf(stderr, "%s variant %d: %lld us, %zu bytes\n", kind.c_str(), v, static_cast<long long>(us),
                   out->payload.size());
      compiles.push_back({{"kind", kind}, {"variant", v}, {"compile_us", us}, {"cubin_bytes", out->payload.size()}});
    }
  }
  nlohmann::json j{{"what", "NVRTC compile times (wall, in process, NVRTC loaded by a warm-up compile first) and "
                            "cubin sizes for -arch=sm_90 of the kernel kinds of bench/kernel_mix.hpp, recorded by "
                            "`bench_eviction_trace record` (bench corpus) or `record-mix` (every kind)"},
                   {"compiles", compiles}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

// The recorded compiles of trace data `data`: 0 and 1 the bench corpus
// (KCACHE_BENCH_COSTS, default bench/data/nvrtc_compile_costs.json), 2 the
// kernel mix (KCACHE_BENCH_MIX, default bench/data/nvrtc_kernel_mix.json).
const std::vector<kcache::test::RecordedCompile>& recorded(std::int64_t data) {
  static const std::vector<kcache::test::RecordedCompile> corpus = kcache::test::load_recorded_compiles(
      env_or("KCACHE_BENCH_COSTS", std::string(KCACHE_SOURCE_DIR) + "/bench/data/nvrtc_compile_costs.json"));
  static const std::vector<kcache::test::RecordedCompile> mix = kcache::test::load_recorded_compiles(
      env_or("KCACHE_BENCH_MIX", std::string(KCACHE_SOURCE_DIR) + "/bench/data/nvrtc_kernel_mix.json"));
  return data == 2 ? mix : corpus;
}

// The replayed trace of trace data `data` and its cap, from the environment
// (KCACHE_BENCH_KERNELS, _REQUESTS, _ZIPF, _CAP_PERCENT): what every policy
// replays, and what `dump-trace` writes for bench/eviction_bound.py.
struct TraceSetup {
  kcache::test::Trace trace;
  double zipf = 0;
  double cap_percent = 0;
  std::uint64_t pass_bytes = 0;  // the passport of one entry
  std::uint64_t cap_bytes = 0;
};

TraceSetup trace_setup(std::int64_t data) {
  TraceSetup s;
  const auto kernels = static_cast<std::size_t>(std::stoul(env_or("KCACHE_BENCH_KERNELS", "4000")));
  const auto requests = static_cast<std::size_t>(std::stoul(env_or("KCACHE_BENCH_REQUESTS", "80000")));
  s.cap_percent = std::stod(env_or("KCACHE_BENCH_CAP_PERCENT", "25"));
  s.zipf = std::stod(env_or("KCACHE_BENCH_ZIPF", "0.8"));
  // The bench corpus in its 70/20/10 mix; the kernel mix with every kind in
  // the same share.
  s.trace = kcache::test::make_trace(recorded(data), kernels, requests, s.zipf, 21,
                                     data == 1 ? kcache::test::TraceSizes::shuffled : kcache::test::TraceSizes::recorded,
                                     data == 2 ? kcache::test::TraceMix{} : kcache::test::corpus_mix());
  if (s.trace.kernels.empty()) {
    return s;
  }
  // Cap: a share of the catalogue's bytes (payload + a passport each); the
  // same for every policy (the metadata, which grows with the entries, is under it too).
  s.pass_bytes = kcache::test::trace_artifact(s.trace.kernels[0]).passport.to_json().size();
  s.cap_bytes = static_cast<std::uint64_t>(static_cast<double>(s.trace.catalogue_bytes + kernels * s.pass_bytes) *
                                           s.cap_percent / 100.0);
  return s;
}

// Exact LRU over the trace (no store, no sampling), each entry
// bytes + pass_bytes, evicting least recently used entries until the new one
// fits under cap_bytes: the check that bench/eviction_bound.py read the same
// trace and replays it the same way (it must print the same totals).
kcache::test::ReplayResult exact_lru(const TraceSetup& s) {
  kcache::test::ReplayResult r;
  std::list<std::uint32_t> order;  // front: most recent
  std::vector<std::list<std::uint32_t>::iterator> where(s.trace.kernels.size(), order.end());
  std::vector<bool> seen(s.trace.kernels.size(), false);
  std::uint64_t size = 0;
  for (const std::uint32_t i : s.trace.requests) {
    ++r.requests;
    const auto entry = [&](std::uint32_t k) { return s.trace.kernels[k].bytes + s.pass_bytes; };
    if (where[i] != order.end()) {
      order.splice(order.begin(), order, where[i]);
      continue;
    }
    ++r.misses;
    r.rebuild_us += s.trace.kernels[i].cost_us;
    if (!seen[i]) {
      seen[i] = true;
      ++r.cold_misses;
      r.cold_us += s.trace.kernels[i].cost_us;
    }
    while (size + entry(i) > s.cap_bytes && !order.empty()) {
      size -= entry(order.back());
      where[order.back()] = order.end();
      order.pop_back();
    }
    order.push_front(i);
    where[i] = order.begin();
    size += entry(i);
  }
  return r;
}

// Prints the trace of data `data` as JSON (kernels [kind, recorded cost in
// µs, cubin bytes, popularity], the requests, the cap) and its exact LRU totals.
int dump_trace(std::int64_t data) {
  if (data < 0 || data > 2) {
    std::fprintf(stderr, "dump-trace: DATA must be 0 (corpus), 1 (corpus, sizes shuffled) or 2 (kernel mix)\n");
    return 2;
  }
  const TraceSetup s = trace_setup(data);
  if (s.trace.kernels.empty()) {
    std::fprintf(stderr, "dump-trace: no recorded compiles (KCACHE_BENCH_COSTS / KCACHE_BENCH_MIX)\n");
    return 1;
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (std::size_t i = 0; i < s.trace.kernels.size(); ++i) {
    const auto& k = s.trace.kernels[i];
    kernels.push_back({k.kind, k.cost_us, k.bytes, s.trace.popularity[i]});
  }
  const auto lru = exact_lru(s);
  nlohmann::json j{{"data", data},
                   {"zipf", s.zipf},
                   {"cap_percent", s.cap_percent},
                   {"seed", 21},
                   {"pass_bytes", s.pass_bytes},
                   {"cap_bytes", s.cap_bytes},
                   {"catalogue_bytes", s.trace.catalogue_bytes},
                   {"kernels", kernels},
                   {"requests", s.trace.requests},
                   {"exact_lru", {{"rebuild_us", lru.rebuild_us}, {"cold_us", lru.cold_us}, {"misses", lru.misses}}}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

fs::path bench_base() {
  const std::string base = env_or("KCACHE_BENCH_DIR", fs::exists("/dev/shm") ? "/dev/shm" : env_or("TMPDIR", "/tmp"));
  return fs::path(base) / ("kcache-bench-eviction-" + std::to_string(::getpid()));
}

std::map<std::string, double> g_warm_rebuild_s;  // per policy, for the ratio

void BM_EvictionTrace(benchmark::State& state) {
  const kcache::EvictionPolicy policies[] = {kcache::EvictionPolicy::lru, kcache::EvictionPolicy::cost,
                                             kcache::EvictionPolicy::gds};
  const auto policy = policies[state.range(0)];
  const std::int64_t data = state.range(1);
  const char* data_names[] = {"corpus/", "corpus_shuffled/", "mix/"};
  const std::string name = std::string(data_names[data]) + kcache::eviction_policy_name(policy);
  const std::string lru_name = name.substr(0, name.find('/') + 1) + "lru";
  if (recorded(data).empty()) {
    state.SkipWithError("no recorded compiles (KCACHE_BENCH_COSTS / KCACHE_BENCH_MIX)");
    return;
  }
  const TraceSetup setup = trace_setup(data);
  const auto& trace = setup.trace;
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
    o.max_size_bytes = setup.cap_bytes;
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
  state.counters["slow_misses"] = static_cast<double>(r.slow_misses);
  state.counters["hit_ratio"] = 1.0 - static_cast<double>(r.misses) / static_cast<double>(r.requests);
  state.counters["errors"] = static_cast<double>(r.errors);
  state.counters["replay_s"] = put_wall_s;
  g_warm_rebuild_s[name] = static_cast<double>(r.warm_rebuild_us()) / 1e6;
  g_warm_rebuild_s[name + "_all"] = static_cast<double>(r.rebuild_us) / 1e6;
  if (policy != kcache::EvictionPolicy::lru && g_warm_rebuild_s.count(lru_name) != 0 && g_warm_rebuild_s[name] > 0) {
    state.counters["lru_over_this_warm"] = g_warm_rebuild_s[lru_name] / g_warm_rebuild_s[name];
    state.counters["lru_over_this_all"] = g_warm_rebuild_s[lru_name + "_all"] / g_warm_rebuild_s[name + "_all"];
  }
}

// Args: policy (0 lru, 1 cost, 2 gds), data (0 the bench corpus, 1 the bench
// corpus with sizes shuffled, 2 the kernel mix).
BENCHMARK(BM_EvictionTrace)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "record") {
    return record({"trivial", "medium", "heavy_cub"}, argc >= 3 ? std::atoi(argv[2]) : 4);
  }
  if (argc >= 2 && std::string(argv[1]) == "record-mix") {
    return record(kcache::bench::kernel_mix_kinds(!env_or("KCACHE_BENCH_CUPY", "").empty()),
                  argc >= 3 ? std::atoi(argv[2]) : 4);
  }
  if (argc >= 3 && std::string(argv[1]) == "dump-trace") {
    return dump_trace(std::atoi(argv[2]));
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
