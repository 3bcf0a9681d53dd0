// bench_file_store: FileStore hit / miss / put / put-at-cap, each beside the
// raw floor measured in the same run (open + read of a file of the same size).
//
//   build/ci/bench/bench_file_store --benchmark_min_time=0.2
//   KCACHE_BENCH_DIR=/path/on/the/disk/to/measure (default: $TMPDIR or /tmp)
#include <fcntl.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "kcache/file_store.hpp"
#include "kcache/key_builder.hpp"
#include "seeded_artifact.hpp"

namespace {

using namespace kcache;

std::filesystem::path bench_root(const std::string& name) {
  const char* base = std::getenv("KCACHE_BENCH_DIR");
  if (base == nullptr) base = std::getenv("TMPDIR");
  auto p = std::filesystem::path(base != nullptr ? base : "/tmp") /
           ("kcache-bench-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p.parent_path());
  return p;
}

struct Cleanup {
  ~Cleanup() {
    const char* base = std::getenv("KCACHE_BENCH_DIR");
    if (base == nullptr) base = std::getenv("TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(base != nullptr ? base : "/tmp") /
                                    ("kcache-bench-" + std::to_string(::getpid())),
                                ec);
  }
} g_cleanup;

Artifact artifact(std::uint64_t seed, std::size_t size) { return bench::seeded_artifact(seed, size); }

std::unique_ptr<FileStore> open(const std::filesystem::path& root, std::uint64_t cap, FsyncPolicy fsync) {
  FileStoreOptions o;
  o.root = root;
  o.max_size_bytes = cap;
  o.fsync = fsync;
  return std::move(*FileStore::open(o));
}

void BM_RawFloor(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto root = bench_root("floor" + std::to_string(size));
  std::filesystem::create_directories(root);
  const auto file = root / "f";
  { auto a = artifact(1, size); FILE* f = std::fopen(file.c_str(), "wb"); std::fwrite(a.payload.data(), 1, size, f); std::fclose(f); }
  std::string buf;
  for (auto _ : state) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    buf.resize(size);
    std::size_t have = 0;
    while (have < size) {
      const ssize_t n = ::read(fd, buf.data() + have, size - have);
      if (n <= 0) break;
      have += static_cast<std::size_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_RawFloor)->Arg(16 << 10)->Arg(256 << 10)->Arg(4 << 20);

void BM_Hit(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  auto store = open(bench_root("hit" + std::to_string(size)), 0, FsyncPolicy::file);
  const auto a = artifact(1, size);
  store->put(a);
  store->get(a.passport.key);  // the first read hashes in full and records the check
  for (auto _ : state) {
    auto got = store->get(a.passport.key);
    if (!got || !got->has_value()) state.SkipWithError("miss");
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_Hit)->Arg(16 << 10)->Arg(256 << 10)->Arg(4 << 20);

// A hit borrowed as a view (FileStore::get_view): mapped from 64 KiB up, no
// copy into a std::string.
void BM_HitView(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  auto store = open(bench_root("hitview" + std::to_string(size)), 0, FsyncPolicy::file);
  const auto a = artifact(1, size);
  store->put(a);
  store->get(a.passport.key);  // the first read hashes in full and records the check
  for (auto _ : state) {
    auto got = store->get_view(a.passport.key);
    if (!got || !got->has_value()) state.SkipWithError("miss");
    benchmark::DoNotOptimize((*got)->bytes().data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_HitView)->Arg(16 << 10)->Arg(256 << 10)->Arg(4 << 20);

void BM_HitAlwaysFull(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  FileStoreOptions o;
  o.root = bench_root("hitfull" + std::to_string(size));
  o.verify = ReadVerify::always_full;
  auto store = std::move(*FileStore::open(o));
  const auto a = artifact(1, size);
  store->put(a);
  for (auto _ : state) {
    auto got = store->get(a.passport.key);
    benchmark::DoNotOptimize(got);
  }
}
BENCHMARK(BM_HitAlwaysFull)->Arg(16 << 10);

void BM_Miss(benchmark::State& state) {
  auto store = open(bench_root("miss"), 0, FsyncPolicy::file);
  store->put(artifact(1, 1024));
  const Key key = artifact(2, 16).passport.key;
  for (auto _ : state) {
    auto got = store->get(key);
    benchmark::DoNotOptimize(got);
  }
}
BENCHMARK(BM_Miss);

void BM_Put(benchmark::State& state) {
  auto store = open(bench_root("put"), 0, FsyncPolicy::file);
  std::uint64_t seed = 1;
  for (auto _ : state) {
    state.PauseTiming();
    const auto a = artifact(seed++, 16 << 10);
    state.ResumeTiming();
    auto r = store->put(a);
    if (!r) state.SkipWithError(r.error().describe().c_str());
  }
}
BENCHMARK(BM_Put)->Unit(benchmark::kMicrosecond);

// Puts at the cap as the cache grows: bench/bench_file_store_put_at_cap.cpp.

}  // namespace

BENCHMARK_MAIN();
