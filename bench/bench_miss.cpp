// bench_miss: what kcache adds to a miss over a big header tree, against
// plain NVRTC on the same kernel in the same run (issue 23 item 2).
//
// Every figure comes from a fresh process (this program re-executed as
// `bench_miss child ...`):
//   plain      NVRTC alone: canonical options, one compile (the library's
//              first load included, as in kcache's NVRTC time).
//   empty      kcache::compile through the configured store (memory + file,
//              background put, flushed and counted) in an empty cache
//              directory, by a user whose per-user memos (the bench's own
//              XDG_CACHE_HOME) one compile of another variant, in another
//              cache directory, warmed.
//   warm       the same in a cache directory where one process compiled the
//              same kernel with another -D before (a second miss).
//   hit_key    then a fresh process that hits that entry: its key derivation.
//   first      (a second table) an empty cache directory and a new
//              XDG_CACHE_HOME: truly the first use of the toolkit and tree.
// cost = everything compile() did besides the NVRTC call (key derivation,
// lookup, the check after the compile, the put and its flush). NVRTC is
// loaded before the kcache child's timed part: plain's figure includes the
// load, and a program that compiles pays it with or without kcache.
// warm_cpu / empty_cpu: the same cost as CPU time (steadier than wall on a
// loaded machine): the process's CPU time over compile() and the flush, all
// threads, less the thread CPU time of the kernel's NVRTC compile call.
// Kernels: `cupy` (#include <cupy/carray.cuh>, C++17, CuPy's five include
// directories), `cccl` (#include <cub/block/block_reduce.cuh> from a copy of
// the toolkit's include/cccl outside the toolkit, as a checkout is), and the
// bench corpus (trivial, medium, heavy_cub). Then the "CuPy-like program":
// 50 distinct small kernels over CuPy's headers in one process and in 50
// processes, with and without kcache (empty cache directory).
//
//   KCACHE_BENCH_CUPY=<dir holding cupy/carray.cuh>   (scripts/fetch-cupy-headers.sh)
//   cmake --build --preset ci --target bench_miss
//   build/ci/bench/bench_miss [rounds=3] [program_kernels=50]
//
// `strace -f -c -e trace=newfstatat,statx,stat,lstat` around one child gives
// the stat calls per miss (docs/performance.md, "Misses and cold compiles").
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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
#include "compile/toolkit_api.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/compiler.hpp"
#include "kcache/config.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/write_behind_store.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// CPU time of the process (all threads: the background put's too) or of the calling thread, in µs.
double cpu_us(clockid_t which) {
  timespec ts{};
  ::clock_gettime(which, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The CPU time of the last NVRTC compile call (the kernel's: it comes after
// any probe during the key derivation), measured on the thread that ran it.
double g_nvrtc_cpu_us = 0;
int (*g_nvrtc_compile)(kcache::jit::NvrtcProgramHandle, int, const char* const*) = nullptr;
int timed_nvrtc_compile(kcache::jit::NvrtcProgramHandle p, int n, const char* const* o) {
  const double t = cpu_us(CLOCK_THREAD_CPUTIME_ID);
  const int rc = g_nvrtc_compile(p, n, o);
  g_nvrtc_cpu_us = cpu_us(CLOCK_THREAD_CPUTIME_ID) - t;
  return rc;
}

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The request for kernel `kind`, variant `v` (distinct source and -D).
kcache::CompileRequest request(const std::string& kind, int v) {
  const fs::path cuda_include = kcache::Toolkit::instance().cuda_home() / "include";
  const std::string n = std::to_string(v);
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.target_kind = "cubin";
  r.options = {"-arch=sm_90", "-DKCACHE_BENCH_VARIANT=" + n};
  if (kind == "cupy") {
    const std::string inc = env("KCACHE_BENCH_CUPY");
    r.name = "cupy_kernel_" + n + ".cu";
    r.source = "#include <cupy/carray.cuh>\n"
               "extern \"C\" __global__ void cupy_kernel_" + n +
               "(CArray<float, 1, true, true> x, CArray<float, 1, true, true> y) {\n"
               "  CUPY_FOR(i, y.size()) { y[i] = x[i] * " + n + ".5f + 1.0f; }\n}\n";
    // CuPy's own options: its include directory, its bundled CCCL, the toolkit's.
    r.options.insert(r.options.end(), {"--std=c++17", "-I" + inc, "-I" + inc + "/cupy/_cccl/cub",
                                       "-I" + inc + "/cupy/_cccl/thrust", "-I" + inc + "/cupy/_cccl/libcudacxx",
                                       "-I" + cuda_include.string()});
  } else if (kind == "cccl") {
    r.name = "cccl_kernel_" + n + ".cu";
    r.source = "#include <cub/block/block_reduce.cuh>\n"
               "extern \"C\" __global__ void cccl_kernel_" + n + "(const int* in, int* out) {\n"
               "  using R = cub::BlockReduce<int, 128>;\n  __shared__ typename R::TempStorage t;\n"
               "  int s = R(t).Sum(in[threadIdx.x] * " + n + ");\n  if (threadIdx.x == 0) *out = s;\n}\n";
    r.options.insert(r.options.end(), {"--std=c++17", "-I" + env("KCACHE_BENCH_CCCL")});
  } else {
    r.name = kind + ".cu";
    r.source = read_text(fs::path(KCACHE_SOURCE_DIR) / "bench" / "corpus" / (kind + ".cu")) + "\n// variant " + n + "\n";
    if (kind == "heavy_cub") {
      r.options.push_back("-I" + (cuda_include / "cccl").string());
      r.options.push_back("-I" + cuda_include.string());
    }
  }
  return r;
}

struct Miss {
  double cost_us = 0;     // compile() besides NVRTC, plus the background put
  double nvrtc_us = 0;    // the NVRTC call
  double key_us = 0;
  bool ok = false;
};

// One child: `plain` or `kcache` compiles of kernels [first, first + count).
int child(const std::string& mode, const std::string& kind, int first, int count, const std::string& cache) {
  std::vector<kcache::CompileRequest> requests;
  for (int i = 0; i < count; ++i) {
    requests.push_back(request(kind, first + i));
  }
  double cost = 0;
  double nvrtc = 0;
  double key = 0;
  double cpu_cost = 0;  // CPU time of compile() and the flush besides the NVRTC compile call
  const auto all = Clock::now();
  if (mode == "key") {  // key derivation alone (for profiles)
    kcache::Toolkit::instance().set_memo_dir(fs::path(cache) / "v1" / "toolkit");
    for (const auto& r : requests) {
      const auto t = Clock::now();
      if (!kcache::derive_key(r)) {
        return 1;
      }
      key += us_since(t);
    }
  } else if (mode == "plain") {
    for (const auto& r : requests) {
      auto canon = kcache::canonicalize_nvrtc_options(r.options);
      if (!canon) {
        std::fprintf(stderr, "%s\n", canon.error().describe().c_str());
        return 1;
      }
      const auto t = Clock::now();
      auto out = kcache::jit::run_nvrtc(r, canon->options);
      nvrtc += us_since(t);
      if (!out) {
        std::fprintf(stderr, "%s\n%s\n", out.error().describe().c_str(), out.error().log.c_str());
        return 1;
      }
    }
  } else {
    kcache::Toolkit::instance().set_memo_dir(fs::path(cache) / "v1" / "toolkit");
    if (mode == "kcache") {
      // The plain child's NVRTC figure includes loading the library; a
      // program that compiles loads it either way, so kcache's cost does not.
      if (auto api = kcache::jit::nvrtc_api()) {
        // The bench times the compile call on its own (cpu_cost below): the
        // table is the library's, filled at load and never const itself.
        auto* table = const_cast<kcache::jit::NvrtcApi*>(*api);
        g_nvrtc_compile = table->compile_program;
        table->compile_program = timed_nvrtc_compile;
      }
    }
    kcache::Config config;
    config.cache_dir = cache;
    auto store = kcache::open_configured_store(config);
    if (!store) {
      std::fprintf(stderr, "%s\n", store.error().describe().c_str());
      return 1;
    }
    auto* behind = dynamic_cast<kcache::WriteBehindStore*>(store->get());
    for (const auto& r : requests) {
      kcache::CompileInfo info;
      const auto t = Clock::now();
      const double cpu0 = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
      g_nvrtc_cpu_us = 0;
      auto a = kcache::compile(r, store->get(), &info);
      if (behind != nullptr) {
        (void)behind->flush();
      }
      const double total = us_since(t);
      cpu_cost += cpu_us(CLOCK_PROCESS_CPUTIME_ID) - cpu0 - g_nvrtc_cpu_us;
      if (mode == "hit") {  // a fresh process that hits: its key derivation
        if (!a || !info.hit) {
          std::fprintf(stderr, "not a hit\n");
          return 1;
        }
        key += static_cast<double>(info.key_us);
        continue;
      }
      if (!a || info.hit || !info.stored) {
        std::fprintf(stderr, "not a stored miss: %s\n", a ? info.not_cacheable_reason.c_str() : a.error().describe().c_str());
        return 1;
      }
      nvrtc += static_cast<double>(info.compile_us);
      cost += total - static_cast<double>(info.compile_us);
      key += static_cast<double>(info.key_us);
    }
  }
  std::printf("%.1f %.1f %.1f %.1f %.1f\n", cost, nvrtc, key, us_since(all), cpu_cost);
  return 0;
}

std::string self;

// Runs a child and reads its five figures.
std::vector<double> run_child(const std::string& mode, const std::string& kind, int first, int count,
                              const std::string& cache) {
  const std::string cmd = self + " child " + mode + " " + kind + " " + std::to_string(first) + " " +
                          std::to_string(count) + " " + (cache.empty() ? "-" : cache);
  FILE* p = ::popen(cmd.c_str(), "r");
  std::vector<double> v(5, -1);
  if (p == nullptr) {
    return v;
  }
  if (std::fscanf(p, "%lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5) {
    v.assign(5, -1);
  }
  ::pclose(p);
  return v;
}

// CPU time (user + system) of the children waited for so far, in ms.
double children_cpu_ms() {
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  self = fs::canonical("/proc/self/exe").string();
  if (argc >= 7 && std::string(argv[1]) == "child") {
    return child(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]), argv[6]);
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const int program_kernels = argc > 2 ? std::atoi(argv[2]) : 50;
  const fs::path dir = fs::temp_directory_path() / ("kcache-bench-miss-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path cuda_include = kcache::Toolkit::instance().cuda_home() / "include";
  if (env("KCACHE_BENCH_CCCL").empty() && fs::exists(cuda_include / "cccl")) {
    // A CCCL tree outside the toolkit, as a checkout is.
    fs::copy(cuda_include / "cccl", dir / "cccl", fs::copy_options::recursive);
    ::setenv("KCACHE_BENCH_CCCL", (dir / "cccl").c_str(), 1);
  }
  std::vector<std::string> kinds;
  if (!env("KCACHE_BENCH_CUPY").empty()) {
    kinds.emplace_back("cupy");
  } else {
    std::fprintf(stderr, "KCACHE_BENCH_CUPY is not set: no CuPy rows (scripts/fetch-cupy-headers.sh)\n");
  }
  kinds.insert(kinds.end(), {"cccl", "trivial", "medium", "heavy_cub"});
  // The children's per-user memos are the bench's own, not the caller's; this
  // user compiled another variant of each kernel, in another cache directory.
  const std::string user = (dir / "user").string();
  ::setenv("XDG_CACHE_HOME", user.c_str(), 1);
  for (const auto& kind : kinds) {
    run_child("kcache", kind, 9000, 1, (dir / ("user-warmup-" + kind)).string());
  }
  // The trees' identities must be older than the racy window before they are trusted.
  ::sleep(3);
  std::printf("%-10s %10s %12s %10s %12s %10s %10s %12s %12s\n", "kernel", "plain_ms", "empty_cost", "empty_%", "warm_cost",
              "warm_%", "hit_key", "warm_cpu", "empty_cpu");
  int serial = 0;
  for (const auto& kind : kinds) {
    std::vector<double> plain;
    std::vector<double> empty;
    std::vector<double> warm;
    std::vector<double> hit;
    std::vector<double> warm_cpu;
    std::vector<double> empty_cpu;
    for (int round = 0; round < rounds; ++round) {
      const int v = 100 + round;
      plain.push_back(run_child("plain", kind, v, 1, "")[1]);
      const std::string fresh = (dir / ("empty" + std::to_string(serial++))).string();
      const auto e = run_child("kcache", kind, v, 1, fresh);
      empty.push_back(e[0]);
      empty_cpu.push_back(e[4]);
      const std::string warmed = (dir / ("warm" + std::to_string(serial++))).string();
      run_child("kcache", kind, v + 1000, 1, warmed);
      const auto w = run_child("kcache", kind, v, 1, warmed);
      warm.push_back(w[0]);
      warm_cpu.push_back(w[4]);
      hit.push_back(run_child("hit", kind, v, 1, warmed)[2]);
    }
    const double p = median(plain);
    std::printf("%-10s %10.1f %10.2fms %9.1f%% %10.2fms %9.1f%% %8.2fms %10.2fms %10.2fms\n", kind.c_str(), p / 1e3,
                median(empty) / 1e3, 100 * median(empty) / p, median(warm) / 1e3, 100 * median(warm) / p,
                median(hit) / 1e3, median(warm_cpu) / 1e3, median(empty_cpu) / 1e3);
    std::fflush(stdout);
  }

  // First use: a new cache directory and a new user (XDG_CACHE_HOME), against plain NVRTC in the same rounds.
  std::printf("%-10s %10s %12s %10s\n", "kernel", "plain_ms", "first_cost", "first_%");
  for (const auto& kind : kinds) {
    std::vector<double> plain;
    std::vector<double> first;
    for (int round = 0; round < rounds; ++round) {
      const int v = 200 + round;
      plain.push_back(run_child("plain", kind, v, 1, "")[1]);
      const std::string new_user = (dir / ("new-user" + std::to_string(serial))).string();
      ::setenv("XDG_CACHE_HOME", new_user.c_str(), 1);
      first.push_back(run_child("kcache", kind, v, 1, (dir / ("first" + std::to_string(serial++))).string())[0]);
      ::setenv("XDG_CACHE_HOME", user.c_str(), 1);
    }
    const double p = median(plain);
    std::printf("%-10s %10.1f %10.2fms %9.1f%%\n", kind.c_str(), p / 1e3, median(first) / 1e3, 100 * median(first) / p);
    std::fflush(stdout);
  }

  if (!env("KCACHE_BENCH_CUPY").empty() && program_kernels > 0) {
    const int n = program_kernels;
    // A child that stops early (an error, a kernel that unexpectedly hit)
    // would make its side look fast: every child must report its figures.
    bool failed = false;
    // All n kernels in one process, each side.
    auto timed = [&](const std::string& mode) {
      const std::string cache = (dir / ("program" + std::to_string(serial++))).string();
      const auto t = Clock::now();
      failed = run_child(mode, "cupy", 0, n, cache)[0] < 0 || failed;
      return us_since(t) / 1e3;
    };
    const double plain1 = timed("plain");
    const double kc1 = timed("kcache");
    // n processes each side, paired: kernel i by plain NVRTC and through
    // kcache one after the other (which goes first alternates), so the
    // machine's load moves both sides alike; wall and CPU (the children's
    // rusage: each child and the shell that starts it, alike on both sides).
    const std::string cache = (dir / ("program" + std::to_string(serial++))).string();
    double plainn = 0;
    double kcn = 0;
    double plainn_cpu = 0;
    double kcn_cpu = 0;
    std::vector<double> extra_cpu;  // per kernel: kcache's process less plain's (ms)
    auto one = [&](const std::string& mode, int i, double& wall, double& cpu) {
      const double c0 = children_cpu_ms();
      const auto t = Clock::now();
      failed = run_child(mode, "cupy", i, 1, mode == "plain" ? "" : cache)[0] < 0 || failed;
      wall += us_since(t) / 1e3;
      const double c = children_cpu_ms() - c0;
      cpu += c;
      return c;
    };
    for (int i = 0; i < n; ++i) {
      double p = 0;
      double k = 0;
      if (i % 2 == 0) {
        p = one("plain", i, plainn, plainn_cpu);
        k = one("kcache", i, kcn, kcn_cpu);
      } else {
        k = one("kcache", i, kcn, kcn_cpu);
        p = one("plain", i, plainn, plainn_cpu);
      }
      extra_cpu.push_back(k - p);
    }
    std::printf("cupy program, %d kernels: one process plain %.0f ms, kcache %.0f ms (%.2fx); "
                "%d processes (paired) plain %.0f ms, kcache %.0f ms (%.2fx), CPU %.0f vs %.0f ms (%.3fx), "
                "kcache's CPU per process: median %+.2f ms\n",
                n, plain1, kc1, kc1 / plain1, n, plainn, kcn, kcn / plainn, plainn_cpu, kcn_cpu,
                kcn_cpu / plainn_cpu, median(extra_cpu));
    if (failed) {
      std::printf("cupy program: a child failed (see stderr above): these figures are not comparable\n");
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
