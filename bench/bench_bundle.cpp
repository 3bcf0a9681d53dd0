// bench_bundle: a hit from the in-place bundle tier against a hit from the
// file store (same entries, same sizes, same run), and `bundle install`
// throughput against the disk's own copy of the bundle file, each with and
// without fsync: BM_Install/0 (fsync = none, the default setting) against
// BM_CopyFloor/0 (a copy), BM_Install/1 (fsync = file) against
// BM_CopyFloor/1 (a copy + fsync).
//
//   build/ci/bench/bench_bundle --benchmark_min_time=0.2
//   KCACHE_BENCH_DIR=/path/on/the/disk/to/measure (default: $TMPDIR or /tmp)
#include <fcntl.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bundle/bundle_store.hpp"
#include "kcache/bundle.hpp"
#include "kcache/file_store.hpp"
#include "kcache/key_builder.hpp"
#include "seeded_artifact.hpp"

namespace {

using namespace kcache;

constexpr int k_entries = 100;

std::filesystem::path bench_base() {
  const char* base = std::getenv("KCACHE_BENCH_DIR");
  if (base == nullptr) base = std::getenv("TMPDIR");
  return std::filesystem::path(base != nullptr ? base : "/tmp") / ("kcache-bench-bundle-" + std::to_string(::getpid()));
}

std::filesystem::path bench_root(const std::string& name) {
  auto p = bench_base() / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

struct Cleanup {
  ~Cleanup() {
    std::error_code ec;
    std::filesystem::remove_all(bench_base(), ec);
  }
} g_cleanup;

Artifact artifact(std::uint64_t seed, std::size_t size) { return bench::seeded_artifact(seed, size, "cubin"); }

std::vector<Artifact> artifacts(std::size_t size, int count) {
  std::vector<Artifact> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(artifact(static_cast<std::uint64_t>(i), size));
  }
  return out;
}

// A signed bundle of `items` in `dir`, and the trust that accepts it.
BundleTrust make_bundle(const std::filesystem::path& dir, const std::vector<Artifact>& items) {
  const auto key = dir / "ci.key";
  auto pub = generate_bundle_keys(key, dir / "ci.key.pub");
  if (!pub || !create_bundle(dir / "b.kcb", items, BundleCreateOptions{key})) {
    std::abort();
  }
  return BundleTrust{{*pub}};
}

std::unique_ptr<FileStore> file_store(const std::filesystem::path& root, FsyncPolicy fsync = FsyncPolicy::file) {
  FileStoreOptions o;
  o.root = root;
  o.max_size_bytes = 0;
  o.fsync = fsync;
  return std::move(*FileStore::open(o));
}

// Warm hits over 100 entries, round robin: the file store (fast verify).
void BM_FileStoreHit(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  auto store = file_store(bench_root("file" + std::to_string(size)));
  const auto items = artifacts(size, k_entries);
  for (const auto& a : items) {
    store->put(a);
    store->get(a.passport.key);  // the first read hashes in full and records the check
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto got = store->get(items[i++ % items.size()].passport.key);
    if (!got || !got->has_value()) state.SkipWithError("miss");
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_FileStoreHit)->Arg(16 << 10)->Arg(256 << 10)->Arg(4 << 20);

// The same from the bundle tier (fast verify after the first hit).
void BM_BundleHit(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto dir = bench_root("bundle" + std::to_string(size));
  const auto items = artifacts(size, k_entries);
  const BundleTrust trust = make_bundle(dir, items);
  auto tier = bundle::BundleStore::open({dir / "b.kcb"}, trust, ReadVerify::fast_when_unchanged, {});
  for (const auto& a : items) {
    tier->get(a.passport.key);  // the first hit hashes in full
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto got = tier->get(items[i++ % items.size()].passport.key);
    if (!got || !got->has_value()) state.SkipWithError("miss");
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_BundleHit)->Arg(16 << 10)->Arg(256 << 10)->Arg(4 << 20);

// Opening the bundle tier: map, digest of the metadata, passports, signature.
void BM_BundleOpen(benchmark::State& state) {
  const auto dir = bench_root("open");
  const auto items = artifacts(64 << 10, static_cast<int>(state.range(0)));
  const BundleTrust trust = make_bundle(dir, items);
  for (auto _ : state) {
    auto tier = bundle::BundleStore::open({dir / "b.kcb"}, trust, ReadVerify::fast_when_unchanged, {});
    if (tier->bundles_in_use() != 1) state.SkipWithError("refused");
    benchmark::DoNotOptimize(tier);
  }
}
BENCHMARK(BM_BundleOpen)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// `bundle install` of 64 entries of 1 MiB into an empty cache (verify every
// payload, then put each with fsync), against the disk's own copy of the
// bundle file (copy_file + fsync: what `cp` and `sync` cost).
void BM_Install(benchmark::State& state) {
  const auto dir = bench_root("install");
  const auto items = artifacts(1 << 20, 64);
  const BundleTrust trust = make_bundle(dir, items);
  std::int64_t bytes = 0;
  int round = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto root = dir / ("cache" + std::to_string(round++));
    auto store = file_store(root, state.range(0) == 0 ? FsyncPolicy::none : FsyncPolicy::file);
    state.ResumeTiming();
    auto report = install_bundle(dir / "b.kcb", trust, *store);
    if (!report || report->stored != items.size()) state.SkipWithError("install failed");
    bytes += static_cast<std::int64_t>(report->bytes);
    state.PauseTiming();
    store.reset();
    std::filesystem::remove_all(root);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(bytes);
}
// Arg: 0 fsync = none (the default setting), 1 fsync = file.
BENCHMARK(BM_Install)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CopyFloor(benchmark::State& state) {
  const auto dir = bench_root("copy");
  const auto items = artifacts(1 << 20, 64);
  make_bundle(dir, items);
  std::int64_t bytes = 0;
  for (auto _ : state) {
    const auto to = dir / "copy.kcb";
    std::filesystem::copy_file(dir / "b.kcb", to, std::filesystem::copy_options::overwrite_existing);
    if (state.range(0) != 0) {
      const int fd = ::open(to.c_str(), O_RDONLY | O_CLOEXEC);
      ::fsync(fd);
      ::close(fd);
    }
    bytes += static_cast<std::int64_t>(64) << 20;
    state.PauseTiming();
    std::filesystem::remove(to);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(bytes);
}
// Arg: 0 a copy, 1 a copy + fsync.
BENCHMARK(BM_CopyFloor)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
