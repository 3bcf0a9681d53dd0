// bench/seeded_artifact.hpp: artifacts whose bytes come from a seed
// (xorshift), so benchmarks make distinct, incompressible payloads cheaply.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "kcache/artifact.hpp"
#include "kcache/key_builder.hpp"

namespace kcache::bench {

// An artifact of `kind` with `size` bytes derived from `seed`, keyed by the seed alone.
inline Artifact seeded_artifact(std::uint64_t seed, std::size_t size, const std::string& kind = "blob") {
  std::string payload(size, '\0');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < size; i += 8) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    std::memcpy(payload.data() + i, &x, std::min<std::size_t>(8, size - i));
  }
  return Artifact::make(KeyBuilder("bench").add("seed", static_cast<std::int64_t>(seed)), kind, std::move(payload));
}

}  // namespace kcache::bench
