// Worker pool and single-flight benchmarks (docs/performance.md, "Worker pool and single-flight").
//
//   BM_CorpusSerialInProcess   64 distinct cold kernels compiled one after the
//                              other in this process (the baseline)
//   BM_CorpusPool/N            the same 64 through compile_many on N workers
//                              (worker start-up included)
//   BM_SingleCompile           one cold key compiled by one process through a
//                              Cache + FileStore (the herd baseline)
//   BM_Herd/P                  P processes ask for one cold key at once;
//                              counter `compiles` must be 1
//
// Run: build/ci/bench/bench_pool --benchmark_counters_tabular=true
// No cache is involved in the corpus runs, so every iteration compiles cold.
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "kcache/cache.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/worker_pool.hpp"
#include "kernel_corpus.hpp"

namespace {

constexpr int k_corpus = 64;

struct Scratch {
  std::filesystem::path path;
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::filesystem::path scratch() {
  static const Scratch dir{[] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kcache-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::abort();
    }
    ::setenv("KCACHE_DIR", (std::filesystem::path(tmpl) / "memo-root").c_str(), 1);
    kcache::Toolkit::instance().set_memo_dir(std::filesystem::path(tmpl) / "memo");
    return std::filesystem::path(tmpl);
  }()};
  return dir.path;
}

void warm_up() {
  scratch();
  static bool done = false;
  if (!done) {
    (void)kcache::compile_in_process(kcache::bench::corpus_request(999999));  // loads NVRTC once
    done = true;
  }
}

void BM_CorpusSerialInProcess(benchmark::State& state) {
  warm_up();
  const auto requests = kcache::bench::corpus(k_corpus);
  int failures = 0;
  for (auto _ : state) {
    for (const auto& r : requests) {
      failures += kcache::compile_in_process(r).has_value() ? 0 : 1;
    }
  }
  state.counters["kernels"] = k_corpus;
  state.counters["failures"] = failures;
}
BENCHMARK(BM_CorpusSerialInProcess)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

void BM_CorpusPool(benchmark::State& state) {
  warm_up();
  const auto requests = kcache::bench::corpus(k_corpus);
  int failures = 0;
  for (auto _ : state) {
    kcache::WorkerPoolOptions o;
    o.executable = KCACHE_CLI_PATH;
    o.workers = static_cast<unsigned>(state.range(0));
    auto pool = kcache::WorkerPool::create(o);
    if (!pool) {
      state.SkipWithError(pool.error().describe().c_str());
      return;
    }
    for (const auto& r : (*pool)->compile_many(requests)) {
      failures += r.has_value() ? 0 : 1;
    }
  }
  state.counters["workers"] = static_cast<double>(state.range(0));
  state.counters["cores"] = std::thread::hardware_concurrency();
  state.counters["failures"] = failures;
}
BENCHMARK(BM_CorpusPool)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// P processes on one cold key; returns the number of compiles they made.
int herd(int processes, const std::filesystem::path& root, const kcache::CompileRequest& request) {
  int fds[2];
  if (::pipe(fds) != 0) {
    return -1;
  }
  std::vector<pid_t> kids;
  for (int i = 0; i < processes; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      kcache::FileStoreOptions fo;
      fo.root = root;
      auto store = kcache::FileStore::open(fo);
      if (!store) {
        ::_exit(2);
      }
      kcache::CacheOptions co;
      co.lock_dir = root / "v1" / "locks";
      kcache::Cache cache(**store, co);
      auto a = cache.get_or_compile(request);
      const char c = static_cast<char>('0' + cache.stats().compiles);
      (void)!::write(fds[1], &c, 1);
      ::_exit(a ? 0 : 1);
    }
    kids.push_back(pid);
  }
  ::close(fds[1]);
  int compiles = 0;
  char c = 0;
  while (::read(fds[0], &c, 1) == 1) {
    compiles += c - '0';
  }
  ::close(fds[0]);
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  return compiles;
}

void BM_SingleCompile(benchmark::State& state) {
  warm_up();
  int n = 0;
  int compiles = 0;
  for (auto _ : state) {
    const auto root = scratch() / ("single-" + std::to_string(n));
    compiles += herd(1, root, kcache::bench::corpus_request(5000 + n++));
  }
  state.counters["compiles_per_iter"] = static_cast<double>(compiles) / n;
}
BENCHMARK(BM_SingleCompile)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_Herd(benchmark::State& state) {
  warm_up();
  static int n = 0;
  int iters = 0;
  int compiles = 0;
  for (auto _ : state) {
    const auto root = scratch() / ("herd-" + std::to_string(n));
    compiles += herd(static_cast<int>(state.range(0)), root, kcache::bench::corpus_request(6000 + n++));
    ++iters;
  }
  state.counters["processes"] = static_cast<double>(state.range(0));
  state.counters["compiles_per_iter"] = static_cast<double>(compiles) / iters;
}
BENCHMARK(BM_Herd)->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
