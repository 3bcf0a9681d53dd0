// bench/bench_nvcc_headers.cpp: how the nvcc launcher should find the headers
// of a compile, measured both ways on the test project (docs/nvcc.md, "How
// headers are found"):
//
//   (a) nvcc's own dependency file (what the launcher does): the list costs
//       nothing to make on a miss (-MD is nvcc's own line-marker filter);
//       kcache then digests every header and works out the absent names; a
//       hit checks the local memo (one stat per header and directory).
//   (b) kcache's header scanner (src/deps, as for NVRTC): every branch,
//       every candidate path, computed includes expanded; headers under the
//       toolkit root covered by its fingerprint, not scanned; a second scan
//       reuses its manifest (stats only).
//
//   cmake --build --preset ci --target bench_nvcc_headers
//   build/ci/bench/bench_nvcc_headers [NVCC] [ROUNDS]
//
// For every unit of tests/nvcc_project: the headers each way finds, the
// time (a) adds to a miss and costs a hit, and (b)'s first and repeated scan
// times and verdict (a scan that cannot key a computed include makes the
// unit not cacheable). CPU time of the measuring thread (system calls
// included), medians over ROUNDS; one JSON object per unit, then a summary.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "deps/header_scanner.hpp"
#include "nvcc/dependency_file.hpp"
#include "nvcc/header_state.hpp"
#include "nvcc/nvcc_manifest.hpp"
#include "support/files.hpp"
#include "util/posix_io.hpp"

namespace fs = std::filesystem;
namespace {

// CPU time of this thread: what the machine's load does not inflate.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
  }
};

double ms_since(double t0) { return Clock::now() - t0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Runs a shell command; its standard output.
std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    return out;
  }
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
    out.append(buf, n);
  }
  ::pclose(p);
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    if (nl > start) {
      out.push_back(text.substr(start, nl - start));
    }
    start = nl + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string nvcc = argc > 1 ? argv[1] : "/usr/local/cuda/bin/nvcc";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const fs::path project = fs::path(KCACHE_SOURCE_DIR) / "tests" / "nvcc_project";
  const fs::path toolkit = fs::path(nvcc).parent_path().parent_path();
  const fs::path work = fs::temp_directory_path() / ("kcache-bench-nvcc-headers-" + std::to_string(::getpid()));
  fs::create_directories(work);
  // The search path of the compile: the project's, the toolkit's (nvcc.profile) and g++'s defaults.
  std::vector<std::string> search{(project / "include").string(), (project / "sysinc").string(),
                                  (toolkit / "targets/x86_64-linux/include").string(),
                                  (toolkit / "targets/x86_64-linux/include/cccl").string()};
  for (const auto& l : lines(shell("g++ -xc++ -E -v - </dev/null 2>&1 | sed -n '/search starts here/,/End of search/p' | "
                                   "grep '^ '"))) {
    search.push_back(l.substr(1));
  }
  std::vector<fs::path> units;
  for (const auto& e : fs::directory_iterator(project / "src")) {
    units.push_back(e.path());
  }
  std::sort(units.begin(), units.end());
  double sum_a_headers = 0, sum_b_headers = 0, sum_a_miss = 0, sum_a_hit = 0, sum_b_cold = 0, sum_b_warm = 0;
  int b_uncacheable = 0;
  for (const auto& unit : units) {
    // (a) The dependency file of the compile, as -MD writes it (here with -M: the same list).
    const fs::path depfile = work / (unit.stem().string() + ".d");
    shell("cd '" + work.string() + "' && '" + nvcc + "' -DPROJECT_SCALE=3 -I'" + (project / "include").string() +
          "' -isystem '" + (project / "sysinc").string() +
          "' --generate-code=arch=compute_90,code=[compute_90,sm_90] -std=c++17 -x cu -c '" + unit.string() +
          "' -M -MF '" + depfile.string() + "'");
    const auto deps = kcache::nvcc::parse_dependency_file(kcache::test::read_file(depfile));
    if (!deps || deps->prerequisites.empty()) {
      std::fprintf(stderr, "no dependency file for %s\n", unit.c_str());
      return 1;
    }
    const std::vector<std::string> headers(deps->prerequisites.begin() + 1, deps->prerequisites.end());
    std::vector<double> a_miss, a_hit, b_cold, b_warm;
    std::size_t absent = 0;
    std::size_t b_headers = 0;
    std::string verdict;
    for (int r = 0; r < rounds; ++r) {
      // (a) on a miss: the absent names and every header's digest; the memo a hit checks.
      auto t0 = Clock::now();
      auto names = kcache::nvcc::absent_names(headers, unit.string(), search, {"cuda_runtime.h"});
      kcache::nvcc::DependencyManifest manifest;
      manifest.headers = headers;
      manifest.absent = names;
      const auto state = kcache::nvcc::header_state(headers, names);
      const auto memo = kcache::nvcc::LocalMemo::make(std::string(64, 'a'), std::string(64, 'b'), std::string(64, 'c'),
                                                       state, manifest, kcache::nvcc::PathRewrite());
      a_miss.push_back(ms_since(t0));
      absent = names.size();
      t0 = Clock::now();
      const bool applies = memo.still_applies();
      a_hit.push_back(ms_since(t0));
      (void)applies;
      // (b) the scanner, from nothing (its memos forgotten, a new memo directory), then again.
      kcache::jit::forget_scan_memos();
      const std::string source = kcache::test::read_file(unit);
      kcache::jit::ScanInput in;
      in.source = source;
      in.program_name = unit.string();
      in.source_path = unit.string();
      in.include_dirs = search;
      in.pre_includes = {"cuda_runtime.h"};
      in.defines = {"PROJECT_SCALE=3"};
      in.toolkit_root = fs::canonical(toolkit);
      in.toolkit_fingerprint = "bench";
      in.memo_dir = work / ("memo-" + std::to_string(r));
      t0 = Clock::now();
      auto cold = kcache::jit::scan_headers(in);
      b_cold.push_back(ms_since(t0));
      t0 = Clock::now();
      auto warm = kcache::jit::scan_headers(in);
      b_warm.push_back(ms_since(t0));
      if (cold) {
        b_headers = cold->headers.size();
        verdict = cold->not_cacheable.empty() ? "cacheable" : "not cacheable: " + cold->not_cacheable;
      } else {
        verdict = "failed: " + cold.error().describe();
      }
      (void)warm;
    }
    sum_a_headers += static_cast<double>(headers.size());
    sum_b_headers += static_cast<double>(b_headers);
    sum_a_miss += median(a_miss);
    sum_a_hit += median(a_hit);
    sum_b_cold += median(b_cold);
    sum_b_warm += median(b_warm);
    b_uncacheable += verdict == "cacheable" ? 0 : 1;
    std::printf("{\"unit\": \"%s\", \"a_headers\": %zu, \"a_absent_names\": %zu, \"a_miss_ms\": %.2f, "
                "\"a_hit_ms\": %.3f, \"b_headers_outside_toolkit\": %zu, \"b_cold_ms\": %.2f, \"b_warm_ms\": %.3f, "
                "\"b_verdict\": \"%s\"}\n",
                unit.filename().c_str(), headers.size(), absent, median(a_miss), median(a_hit), b_headers,
                median(b_cold), median(b_warm), verdict.substr(0, 120).c_str());
  }
  const double n = static_cast<double>(units.size());
  std::printf("{\"units\": %zu, \"a_headers_mean\": %.1f, \"b_headers_outside_toolkit_mean\": %.1f, "
              "\"a_miss_ms_mean\": %.2f, \"a_hit_ms_mean\": %.3f, \"b_cold_ms_mean\": %.2f, \"b_warm_ms_mean\": %.3f, "
              "\"b_not_cacheable\": %d}\n",
              units.size(), sum_a_headers / n, sum_b_headers / n, sum_a_miss / n, sum_a_hit / n, sum_b_cold / n,
              sum_b_warm / n, b_uncacheable);
  std::error_code ec;
  fs::remove_all(work, ec);
  return 0;
}
