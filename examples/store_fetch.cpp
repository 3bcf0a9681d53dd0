// store_fetch: put an artifact into the configured cache and fetch it back,
// the way a program that compiles kernels at run time would.
//
//   store_fetch [FILE]
//
// Uses only the public API (include/kcache/). Settings come from the same
// places as for the kcache command: KCACHE_* variables, the config file,
// defaults. Exits 0 when the bytes fetched equal the bytes stored.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kcache/blob.hpp"
#include "kcache/config.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/write_behind_store.hpp"

namespace {

const char* tier_name(int tier) {
  switch (tier) {
    case 0: return "memory";
    case 1: return "disk";
    default: return "none (miss)";
  }
}

}  // namespace

int main(int argc, char** argv) {
  // 1. The settings: command line > environment > config file > default.
  auto config = kcache::Config::load();
  if (!config) {
    std::fprintf(stderr, "store_fetch: %s\n", config.error().describe().c_str());
    return 2;
  }
  std::printf("cache directory: %s (cap %s)\n", config->cache_dir.c_str(),
              kcache::format_size(config->max_size_bytes).c_str());

  // 2. The bytes to keep: a file, or a generated "compiled kernel".
  std::string bytes;
  if (argc > 1) {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "store_fetch: cannot read %s\n", argv[1]);
      return 2;
    }
    std::ostringstream s;
    s << in.rdbuf();
    bytes = s.str();
  } else {
    bytes = "// pretend this is a cubin produced by an expensive compile\n";
    for (int i = 0; i < 1000; ++i) {
      bytes += "ld.global.f32 %f" + std::to_string(i) + ", [%rd" + std::to_string(i % 7) + "];\n";
    }
  }

  // 3. An artifact: payload + passport. The key covers the kind and the
  //    content; a real compiler would also record its log and duration.
  auto artifact = kcache::make_blob("example", bytes, {{"example", "store_fetch"}});
  if (!artifact) {
    std::fprintf(stderr, "store_fetch: %s\n", artifact.error().describe().c_str());
    return 1;
  }
  artifact->passport.compile_duration_us = 250'000;  // what a cold compile would have cost
  const kcache::Key key = artifact->passport.key;
  std::printf("key: %s (%s, kind %s)\n", key.hex().c_str(), kcache::format_size(bytes.size()).c_str(),
              artifact->passport.kind.c_str());

  // 4. The configured store: memory in front of the on-disk cache.
  auto store = kcache::open_configured_store(*config);
  if (!store) {
    std::fprintf(stderr, "store_fetch: %s\n", store.error().describe().c_str());
    return 1;
  }
  auto put = (*store)->put(*artifact);
  if (!put) {
    std::fprintf(stderr, "store_fetch: put failed: %s\n", put.error().describe().c_str());
    return 1;
  }
  std::printf("put: %s\n", *put == kcache::PutOutcome::stored    ? "stored"
                          : *put == kcache::PutOutcome::queued  ? "queued (a background thread publishes it)"
                                                                : "already present");
  // With the default `put = background` the store is a WriteBehindStore:
  // flush() waits for the publish (its destructor would too).
  if (auto* behind = dynamic_cast<kcache::WriteBehindStore*>(store->get())) {
    if (auto flushed = behind->flush(); !flushed) {
      std::printf("flush: not kept (%s); the program goes on without the cache\n",
                  flushed.error().describe().c_str());
    }
  }

  // 5. Fetch it back twice: from this process's memory tier, then through a
  //    fresh store (as another process would) from disk, verified.
  for (int round = 0; round < 2; ++round) {
    auto fresh = round == 0 ? std::move(*store) : kcache::open_configured_store(*config).value();
    const auto start = std::chrono::steady_clock::now();
    auto got = fresh->get(key);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
    if (!got) {
      std::fprintf(stderr, "store_fetch: get failed: %s\n", got.error().describe().c_str());
      return 1;
    }
    if (!got->has_value()) {
      std::printf("get: miss (is the cache disabled? KCACHE_DISABLE)\n");
      return config->disable ? 0 : 1;
    }
    const bool same = (*got)->payload == bytes;
    std::printf("get (%s store): hit from %s tier in %lld us, bytes %s\n", round == 0 ? "same" : "fresh",
                tier_name(kcache::TieredStore::last_hit_tier()), static_cast<long long>(us.count()),
                same ? "identical" : "DIFFERENT");
    if (!same) {
      return 1;
    }
  }
  return 0;
}
