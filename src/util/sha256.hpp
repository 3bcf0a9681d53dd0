// util/sha256.hpp: SHA-256 (OpenSSL) and XXH3 helpers.
//
// Thread-safety: Sha256 is a value; the free functions are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kcache::util {

using Digest256 = std::array<std::uint8_t, 32>;

// Incremental SHA-256. Never fails for valid use; an OpenSSL failure aborts,
// since a wrong digest must never be produced silently. A plain value: the
// state lives inside the object (no allocation).
class Sha256 {
 public:
  Sha256();

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Returns the digest; the object must not be updated afterwards.
  Digest256 finish();

 private:
  // OpenSSL's SHA256_CTX (112 bytes on every platform OpenSSL supports);
  // sha256.cpp checks the size and alignment.
  alignas(8) unsigned char m_state[112];
};

Digest256 sha256(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);

// HMAC-SHA256 (RFC 2104) of `bytes` under `key`, built on Sha256. OpenSSL's
// HMAC() would do the same through EVP, and linking it pulls OpenSSL's
// provider machinery into the kcache command: hundreds of KiB of pointer
// tables that the loader relocates in every process (docs/performance.md,
// "Process start").
Digest256 hmac_sha256(std::string_view key, std::string_view bytes);

// Incremental HMAC-SHA256: update() over consecutive pieces gives the MAC
// hmac_sha256() gives over their concatenation. A plain value.
class HmacSha256 {
 public:
  explicit HmacSha256(std::string_view key);
  void update(const void* data, std::size_t size) { m_inner.update(data, size); }
  void update(std::string_view bytes) { m_inner.update(bytes); }
  // Returns the MAC; the object must not be updated afterwards.
  Digest256 finish();

 private:
  Sha256 m_inner;
  std::array<unsigned char, 64> m_key{};  // the key, padded (hashed when longer than a block)
};

// True when the `size` bytes at `a` and `b` are equal, in time that does not
// depend on where they differ (for comparing MACs).
bool equal_constant_time(const void* a, const void* b, std::size_t size) noexcept;

// XXH3-64 of `bytes`: a fast integrity check, never an identity.
std::uint64_t xxh3_64(std::string_view bytes) noexcept;

// Incremental XXH3-64: update() over consecutive pieces gives the digest
// xxh3_64() gives over their concatenation. A plain value (no allocation).
class Xxh3 {
 public:
  Xxh3() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  std::uint64_t digest() const noexcept;

 private:
  // xxHash's XXH3_state_t (576 bytes, 64-byte aligned); sha256.cpp checks it.
  alignas(64) unsigned char m_state[576];
};

}  // namespace kcache::util
