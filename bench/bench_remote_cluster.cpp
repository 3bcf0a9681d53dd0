// bench_remote_cluster: many clients doing small lookups (GETRANGE of 16 KiB
// objects, 1000 distinct names, the backend's whole get path) against one
// standalone Redis and against a Redis Cluster of 3 masters, in the same run.
// Each benchmark thread is one client with its own backend (as one process
// would be); items_per_second is the lookups of all clients together, p99_us
// each client's 99th percentile latency averaged over the clients.
//
//   scripts/bench-redis-cluster.sh start   # standalone on 6499, cluster on 7201-7206
//   build/ci/bench/bench_remote_cluster --benchmark_min_time=1
//
// KCACHE_BENCH_REDIS (default redis://127.0.0.1:6499) and KCACHE_BENCH_CLUSTER
// (default redis+cluster://127.0.0.1:7201,127.0.0.1:7202) name other servers.
//   scripts/bench-redis-cluster.sh stop
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "store/remote/remote_backend.hpp"

namespace {

namespace kr = kcache::remote;

constexpr int k_names = 1000;
constexpr std::size_t k_object = 16 << 10;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string name_of(int i) { return "kcache:bench:" + std::to_string(i); }

std::unique_ptr<kr::RemoteBackend> open(const std::string& url) {
  auto spec = kr::parse_remote_url(url);
  if (!spec) {
    return nullptr;
  }
  auto b = kr::make_backend(*spec);
  return b ? std::move(*b) : nullptr;
}

void lookups(benchmark::State& state, const std::string& url) {
  auto backend = open(url);
  if (backend == nullptr) {
    state.SkipWithError(("cannot open " + url).c_str());
    return;
  }
  if (state.thread_index() == 0) {
    const std::string value(k_object, 'v');
    for (int i = 0; i < k_names; ++i) {
      if (!backend->put(name_of(i), value, 0)) {
        state.SkipWithError(("cannot write to " + url + "; is it running?").c_str());
        return;
      }
    }
  }
  int i = state.thread_index() * 97;
  std::vector<double> us;
  us.reserve(1 << 16);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto got = backend->get(name_of(i % k_names), k_object);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (!got || !got->has_value()) {
      state.SkipWithError("lookup failed");
      return;
    }
    benchmark::DoNotOptimize(got);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
  // Each client's p99 latency, averaged over the clients.
  std::sort(us.begin(), us.end());
  state.counters["p99_us"] = benchmark::Counter(us.empty() ? 0 : us[us.size() * 99 / 100],
                                                benchmark::Counter::kAvgThreads);
}

void BM_StandaloneLookups(benchmark::State& state) {
  lookups(state, env_or("KCACHE_BENCH_REDIS", "redis://127.0.0.1:6499"));
}
void BM_ClusterLookups(benchmark::State& state) {
  lookups(state, env_or("KCACHE_BENCH_CLUSTER", "redis+cluster://127.0.0.1:7201,127.0.0.1:7202"));
}

}  // namespace

BENCHMARK(BM_StandaloneLookups)->Threads(1)->Threads(16)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ClusterLookups)->Threads(1)->Threads(16)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
