// bench_name_evidence: what leaving the program name's directory out by
// evidence costs on a miss, and what it gives (docs/keys.md, "Left out by
// evidence"; compile/name_evidence.hpp).
//
// Per kernel kind (CuPy's ElementwiseKernel-style and complex<float> kernels
// over CuPy's headers, a CCCL BlockReduce kernel), in one process, each round
// a fresh variant (a new source, so a new key) named as CuPy names it, a
// new /tmp/tmpXXXXXXXX/kern.cu:
//   compile   the NVRTC compile of the miss (CompileInfo::compile_us)
//   probe     the evidence compile under another directory (evidence_us)
//   ratio     probe / compile, and (compile + probe) / compile: the miss's
//             NVRTC time with the evidence against without it
//   hit       the same kernel under another temporary directory: served
//             (it was a compile in every process before)
// Medians over the rounds; all rows from the same run.
//
//   KCACHE_BENCH_CUPY=$(scripts/fetch-cupy-headers.sh) build/ci/bench/bench_name_evidence [rounds=5]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kcache/compiler.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/toolkit.hpp"
#include "kernel_mix.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kcache;
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const char* cupy = std::getenv("KCACHE_BENCH_CUPY");
  const bool with_cupy = cupy != nullptr && *cupy != '\0';
  if (!with_cupy) {
    std::fprintf(stderr, "KCACHE_BENCH_CUPY is not set: no CuPy rows (scripts/fetch-cupy-headers.sh)\n");
  }
  const auto cuda_include = Toolkit::instance().cuda_home() / "include";
  std::vector<std::string> kinds = {"cccl_block_reduce"};
  if (with_cupy) {
    kinds.insert(kinds.begin(), {"cupy_elementwise", "cupy_complex"});
  }
  MemoryStore store(256u << 20);
  std::printf("%-20s %10s %10s %8s %12s %8s %6s\n", "kernel", "compile_ms", "probe_ms", "probe/c", "(c+probe)/c",
              "hit_ms", "hits");
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  for (const auto& kind : kinds) {
    std::vector<double> compile_ms;
    std::vector<double> probe_ms;
    std::vector<double> hit_ms;
    int hits = 0;
    for (int i = 0; i <= rounds; ++i) {
      auto r = bench::kernel_mix_request(kind, 1000 + i, KCACHE_SOURCE_DIR, cuda_include, with_cupy ? cupy : "");
      if (!r) {
        return 1;
      }
      r->source += "// " + std::to_string(::getpid()) + "-" + std::to_string(stamp) + "\n";
      r->name = "/tmp/tmp" + std::to_string(stamp % 100000000) + std::to_string(i) + "/kern.cu";
      CompileInfo miss;
      auto a = compile(*r, &store, &miss);
      if (!a || miss.hit) {
        std::fprintf(stderr, "%s: %s\n", kind.c_str(), a ? "an unexpected hit" : a.error().describe().c_str());
        return 1;
      }
      r->name = "/tmp/tmpzz" + std::to_string(i) + "/kern.cu";
      CompileInfo again;
      const auto t0 = std::chrono::steady_clock::now();
      auto b = compile(*r, &store, &again);
      const double took = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!b) {
        return 1;
      }
      if (i == 0) {
        continue;  // the first round loads NVRTC and reads the tree: not a figure
      }
      compile_ms.push_back(static_cast<double>(miss.compile_us) / 1e3);
      probe_ms.push_back(static_cast<double>(miss.evidence_us) / 1e3);
      hit_ms.push_back(took);
      hits += again.hit ? 1 : 0;
    }
    const double c = median(compile_ms);
    const double p = median(probe_ms);
    std::printf("%-20s %10.1f %10.1f %8.2f %12.2f %8.2f %3d/%d\n", kind.c_str(), c, p, c > 0 ? p / c : 0.0,
                c > 0 ? (c + p) / c : 0.0, median(hit_ms), hits, rounds);
  }
  return 0;
}
