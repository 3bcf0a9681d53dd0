// tests/support/eviction_trace.hpp: a replayed trace of mixed kernels for the
// eviction policy (issue 21), shared by test_file_store_cost_eviction.cpp and
// bench/bench_eviction_trace.cpp (header-only).
//
// The kernels' rebuild costs and sizes are real: each kernel of the trace
// takes the compile time and cubin size of one recorded NVRTC compile of the
// bench corpus (bench/corpus: trivial, medium, heavy_cub), recorded by
// `bench_eviction_trace record` into bench/data/nvrtc_compile_costs.json. The
// payload bytes are synthetic (a PRNG stream of the recorded size). Requests
// follow a Zipf popularity over the kernels in random order, independent of
// their kind, so LRU treats a seconds-long CUB kernel like a trivial one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kcache/file_store.hpp"
#include "kcache/key_builder.hpp"

namespace kcache::test {

// One recorded NVRTC compile.
struct RecordedCompile {
  std::string kind;  // trivial, medium, heavy_cub
  std::uint64_t compile_us = 0;
  std::uint64_t cubin_bytes = 0;
};

// Reads the recorded compiles (a JSON object {"compiles": [{kind, compile_us,
// cubin_bytes}, ...]}). Empty when the file cannot be read or parsed.
inline std::vector<RecordedCompile> load_recorded_compiles(const std::filesystem::path& path) {
  std::vector<RecordedCompile> out;
  std::ifstream in(path);
  if (!in) {
    return out;
  }
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("compiles") || !j["compiles"].is_array()) {
    return out;
  }
  for (const auto& c : j["compiles"]) {
    out.push_back({c.value("kind", ""), c.value("compile_us", std::uint64_t{0}), c.value("cubin_bytes", std::uint64_t{0})});
  }
  return out;
}

struct TraceKernel {
  std::uint64_t seed = 0;
  std::string kind;
  std::uint64_t cost_us = 0;
  std::uint64_t bytes = 0;
};

// How the trace's payload sizes relate to the recorded compiles.
enum class TraceSizes {
  recorded,  // each kernel has the cubin size of its own recorded compile
  // each kernel has the cubin size of a recorded compile drawn independently
  // of its kind: the same sizes and the same costs, but size no longer grows
  // with build time (as when cheap kernels of one compiler and expensive ones
  // of another end up with cubins of any size)
  shuffled,
};

struct Trace {
  std::vector<TraceKernel> kernels;
  std::vector<std::uint32_t> requests;  // indices into kernels
  std::uint64_t catalogue_bytes = 0;    // payload bytes of every kernel
  // The probability that a request is for each kernel (its Zipf weight): the
  // requests are independent draws from it.
  std::vector<double> popularity;
};

// The share of each kind of kernel in a trace's catalogue.
using TraceMix = std::vector<std::pair<std::string, double>>;

// The bench corpus mix of bench/data/nvrtc_compile_costs.json: 70 % trivial,
// 20 % medium, 10 % heavy CUB.
inline TraceMix corpus_mix() {
  return {{"trivial", 0.7}, {"medium", 0.2}, {"heavy_cub", 0.1}};
}

// Every kind of `recorded` in the same share, in the order first recorded
// (the mix of bench/data/nvrtc_kernel_mix.json: no kind is favoured).
inline TraceMix equal_mix(const std::vector<RecordedCompile>& recorded) {
  TraceMix mix;
  for (const auto& r : recorded) {
    if (std::none_of(mix.begin(), mix.end(), [&](const auto& m) { return m.first == r.kind; })) {
      mix.emplace_back(r.kind, 1.0);
    }
  }
  for (auto& m : mix) {
    m.second = 1.0 / static_cast<double>(mix.size());
  }
  return mix;
}

// `kernels` kernels, of kinds in the proportions `mix` (empty: equal_mix),
// each taking the cost and size of a recorded compile of its kind in turn;
// `requests` requests with Zipf(`zipf_s`) popularity over a random order of
// the kernels. Empty when a kind of `mix` has no recorded compile.
inline Trace make_trace(const std::vector<RecordedCompile>& recorded, std::size_t kernels, std::size_t requests,
                        double zipf_s, std::uint32_t rng_seed, TraceSizes sizes = TraceSizes::recorded,
                        TraceMix mix = {}) {
  Trace t;
  if (mix.empty()) {
    mix = equal_mix(recorded);
  }
  std::vector<std::vector<RecordedCompile>> by_kind(mix.size());
  for (const auto& r : recorded) {
    for (std::size_t k = 0; k < mix.size(); ++k) {
      if (r.kind == mix[k].first) {
        by_kind[k].push_back(r);
      }
    }
  }
  double total_share = 0;
  for (std::size_t k = 0; k < mix.size(); ++k) {
    if (by_kind[k].empty()) {
      return t;
    }
    total_share += mix[k].second;
  }
  std::vector<std::size_t> used(mix.size(), 0);
  for (std::size_t i = 0; i < kernels; ++i) {
    // Kind by share, spread evenly over the catalogue.
    const double x = (static_cast<double>(i) + 0.5) / static_cast<double>(kernels) * total_share;
    std::size_t k = 0;
    for (double below = mix[0].second; k + 1 < mix.size() && x >= below; below += mix[++k].second) {
    }
    const auto& r = by_kind[k][used[k]++ % by_kind[k].size()];
    t.kernels.push_back({0x5eed0000ULL + i, r.kind, r.compile_us, std::max<std::uint64_t>(r.cubin_bytes, 1)});
    t.catalogue_bytes += t.kernels.back().bytes;
  }
  std::mt19937_64 rng(rng_seed);
  if (sizes == TraceSizes::shuffled) {
    // The same multiset of sizes, assigned in random order.
    std::vector<std::uint64_t> all;
    for (const auto& k : t.kernels) {
      all.push_back(k.bytes);
    }
    std::shuffle(all.begin(), all.end(), rng);
    for (std::size_t i = 0; i < kernels; ++i) {
      t.kernels[i].bytes = all[i];
    }
  }
  std::vector<std::uint32_t> order(kernels);
  for (std::size_t i = 0; i < kernels; ++i) {
    order[i] = static_cast<std::uint32_t>(i);
  }
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> cdf(kernels);
  double sum = 0;
  for (std::size_t r = 0; r < kernels; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), zipf_s);
    cdf[r] = sum;
  }
  t.popularity.assign(kernels, 0.0);
  for (std::size_t r = 0; r < kernels; ++r) {
    t.popularity[order[r]] = (cdf[r] - (r == 0 ? 0.0 : cdf[r - 1])) / sum;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  t.requests.reserve(requests);
  for (std::size_t q = 0; q < requests; ++q) {
    const auto rank = static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    t.requests.push_back(order[std::min(rank, kernels - 1)]);
  }
  return t;
}

// The artifact of a trace kernel: synthetic bytes of its recorded size, its
// recorded compile time in the passport.
inline Artifact trace_artifact(const TraceKernel& k) {
  std::string payload(k.bytes, '\0');
  std::uint64_t x = k.seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < payload.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(payload.data() + i, &x, std::min<std::size_t>(8, payload.size() - i));
  }
  auto a = Artifact::make(KeyBuilder("eviction-trace").add("seed", static_cast<std::int64_t>(k.seed)), "cubin",
                          std::move(payload));
  a.passport.compile_duration_us = k.cost_us;
  return a;
}

struct ReplayResult {
  std::uint64_t requests = 0;
  std::uint64_t misses = 0;
  std::uint64_t rebuild_us = 0;       // every miss: what the rebuilds would cost
  std::uint64_t cold_misses = 0;      // first requests of a kernel (the same under any policy)
  std::uint64_t cold_us = 0;
  std::uint64_t heavy_misses = 0;     // misses of heavy_cub kernels after their first
  std::uint64_t slow_misses = 0;      // misses of kernels of 1 s or more after their first
  std::uint64_t errors = 0;
  // Rebuild time of the misses that any cache would have (cold) removed:
  // what the policy decides.
  std::uint64_t warm_rebuild_us() const { return rebuild_us - cold_us; }
};

// Replays `t` on `store`: each request is a get; a miss "rebuilds" (adds the
// kernel's recorded cost) and puts the artifact.
inline ReplayResult replay(FileStore& store, const Trace& t) {
  ReplayResult r;
  std::vector<bool> seen(t.kernels.size(), false);
  std::vector<Key> keys;
  keys.reserve(t.kernels.size());
  for (const auto& k : t.kernels) {
    keys.push_back(trace_artifact(TraceKernel{k.seed, k.kind, 0, 1}).passport.key);
  }
  for (const std::uint32_t i : t.requests) {
    ++r.requests;
    auto got = store.get(keys[i]);
    if (!got) {
      ++r.errors;
      continue;
    }
    if (got->has_value()) {
      seen[i] = true;
      continue;
    }
    const auto& k = t.kernels[i];
    ++r.misses;
    r.rebuild_us += k.cost_us;
    if (!seen[i]) {
      ++r.cold_misses;
      r.cold_us += k.cost_us;
      seen[i] = true;
    } else {
      r.heavy_misses += k.kind == "heavy_cub" ? 1 : 0;
      r.slow_misses += k.cost_us >= 1'000'000 ? 1 : 0;
    }
    if (!store.put(trace_artifact(k))) {
      ++r.errors;
    }
  }
  return r;
}

}  // namespace kcache::test
