// bench/remote_entries.hpp: the entries the remote benchmarks store, as a
// team's remote holds them: cubin-like payloads (half random, half
// structured, so zstd has some work), zstd level 1, signed with a fixed team
// key (remote_key_file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "kcache/artifact.hpp"
#include "kcache/key_builder.hpp"
#include "store/remote/remote_codec.hpp"

namespace kcache::bench {

// Entry `index` of `size` payload bytes: its own key and its own bytes.
inline Artifact make_remote_entry(std::size_t size, std::int64_t index = 0) {
  std::string payload(size, '\0');
  std::mt19937_64 rng(size + static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  for (std::size_t i = 0; i < size; ++i) {
    payload[i] = (i / 64) % 2 == 0 ? static_cast<char>(rng()) : static_cast<char>(i & 0x0f);
  }
  KeyBuilder key("bench");
  key.add("size", static_cast<std::int64_t>(size));
  if (index != 0) {
    key.add("index", index);
  }
  return Artifact::make(key, "cubin", std::move(payload));
}

// Writers sign and readers verify with this team key.
inline remote::CodecOptions remote_codec() {
  remote::CodecOptions o;
  o.sign = *remote::make_team_key(std::string(32, 'b'));
  return o;
}

}  // namespace kcache::bench
