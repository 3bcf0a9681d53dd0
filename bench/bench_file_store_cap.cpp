// bench_file_store_cap: do W processes writing under one cap keep the disk
// within 1.1x of it, whatever the entry size? Each writer process puts entries
// as fast as it can while the parent samples the bytes on disk (payloads,
// passports, staged temp files and the metadata under v1/stats) every few
// milliseconds. Reported: the largest sample and the final size, each as a
// multiple of the cap. Arguments: writers, entry size, cap; each writer writes
// 4x the cap (issue 13 item 3: entries up to 1/16 of the cap, 8 and 32 writers).
//
//   build/ci/bench/bench_file_store_cap
//   KCACHE_BENCH_DIR=/path/on/the/disk/to/measure (default: $TMPDIR or /tmp)
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kcache/file_store.hpp"
#include "kcache/key_builder.hpp"

namespace {

using namespace kcache;

std::filesystem::path bench_root() {
  const char* base = std::getenv("KCACHE_BENCH_DIR");
  if (base == nullptr) {
    base = std::getenv("TMPDIR");
  }
  return std::filesystem::path(base != nullptr ? base : "/tmp") /
         ("kcache-bench-cap-" + std::to_string(::getpid()));
}

Artifact artifact(std::uint64_t seed, std::size_t size) {
  std::string payload(size, '\0');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(payload.data() + i, &x, std::min<std::size_t>(8, size - i));
  }
  return Artifact::make(KeyBuilder("bench").add("seed", static_cast<std::int64_t>(seed)), "blob",
                        std::move(payload));
}

// Bytes of regular files under v1/entries and v1/tmp.
std::uint64_t bytes_on_disk(const std::filesystem::path& root) {
  std::uint64_t total = 0;
  for (const char* sub : {"v1/entries", "v1/tmp", "v1/stats"}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root / sub, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code e2;
      if (it->is_regular_file(e2)) {
        const auto size = it->file_size(e2);
        total += e2 ? 0 : size;
      }
    }
  }
  return total;
}

void BM_WritersUnderOneCap(benchmark::State& state) {
  const int writers = static_cast<int>(state.range(0));
  const auto entry_size = static_cast<std::size_t>(state.range(1));
  const auto cap = static_cast<std::uint64_t>(state.range(2));
  const int puts_per_writer = static_cast<int>(4 * cap / entry_size);  // each writer alone writes 4x the cap
  const auto root = bench_root();
  FileStoreOptions options;
  options.root = root;
  options.max_size_bytes = cap;
  options.warn = [](const std::string&) {};
  for (auto _ : state) {
    std::filesystem::remove_all(root);
    { auto created = FileStore::open(options); }
    std::vector<pid_t> children;
    for (int w = 0; w < writers; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        auto store = FileStore::open(options);
        if (!store) {
          ::_exit(2);
        }
        for (int i = 0; i < puts_per_writer; ++i) {
          (void)(*store)->put(artifact(static_cast<std::uint64_t>(w) * 1'000'000 + i, entry_size));
        }
        ::_exit(0);
      }
      children.push_back(pid);
    }
    std::uint64_t peak = 0;
    std::uint64_t peak_accounted = 0;
    auto observer = FileStore::open(options);
    int running = writers;
    while (running > 0) {
      peak = std::max(peak, bytes_on_disk(root));
      if (observer) {
        peak_accounted = std::max(peak_accounted, (*observer)->stats()->size_bytes);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (auto& pid : children) {
        int status = 0;
        if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
          pid = -1;
          --running;
        }
      }
    }
    const std::uint64_t final_bytes = bytes_on_disk(root);
    state.counters["peak_over_cap"] = static_cast<double>(peak) / static_cast<double>(cap);
    state.counters["peak_accounted_over_cap"] = static_cast<double>(peak_accounted) / static_cast<double>(cap);
    state.counters["final_over_cap"] = static_cast<double>(final_bytes) / static_cast<double>(cap);
    state.counters["puts"] = static_cast<double>(writers * puts_per_writer);
  }
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_WritersUnderOneCap)
    ->ArgNames({"writers", "entry", "cap"})
    ->Args({8, 64 << 10, 8 << 20})   // the original case: entries 1/128 of the cap
    ->Args({8, 1 << 10, 1 << 20})    // small entries under a small cap
    ->Args({8, 16 << 10, 1 << 20})   // 1/64
    ->Args({8, 64 << 10, 1 << 20})   // 1/16
    ->Args({32, 16 << 10, 1 << 20})
    ->Args({32, 64 << 10, 1 << 20})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
