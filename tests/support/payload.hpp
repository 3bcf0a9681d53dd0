// tests/support/payload.hpp: self-checking payloads (TESTING.md).
//
// A payload is header(seed, len) || PRNG(seed): any reader in any process can
// tell whether the bytes it got are exactly one writer's complete value,
// without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/artifact.hpp"

namespace kcache::test {

inline constexpr std::size_t k_payload_header = 24;  // "KCTP" u32 pad, u64 seed, u64 len

// Builds `len` bytes (len >= k_payload_header) for `seed`.
std::string make_payload(std::uint64_t seed, std::size_t len);

// Returns the seed when `bytes` is exactly make_payload(seed, bytes.size()), else nullopt.
std::optional<std::uint64_t> check_payload(std::string_view bytes);

// The key of test entry `key_seed` (domain "test").
Key test_key(std::uint64_t key_seed);

// An artifact of kind "blob" under test_key(key_seed) holding make_payload(payload_seed, len).
Artifact make_artifact(std::uint64_t key_seed, std::uint64_t payload_seed, std::size_t len);

}  // namespace kcache::test
