// kcache/key.hpp: the content key of an artifact.
//
// A key is SHA-256 over a canonical encoding of every input that can change the
// output bytes (see key_builder.hpp). It is printed as exactly 64 lowercase hex
// characters and nothing else is ever accepted as a key (TESTING S01): parse()
// rejects anything else before a path is built from it.
//
// Thread-safety: a Key is an immutable value.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache {

class Key {
 public:
  static constexpr std::size_t k_size = 32;
  static constexpr std::size_t k_hex_size = 64;
  using Bytes = std::array<std::uint8_t, k_size>;

  // The all-zero key. Never produced by a KeyBuilder; useful as a placeholder.
  Key() = default;
  explicit Key(const Bytes& bytes) noexcept : m_bytes(bytes) {}

  // Parses 64 lowercase hex characters. Returns invalid_argument for anything
  // else: other lengths, uppercase, whitespace, NUL, path characters.
  static Result<Key> parse(std::string_view hex);

  // Returns true when `text` would parse.
  static bool is_valid_hex(std::string_view text) noexcept;

  // Returns the 64-character lowercase hex form.
  std::string hex() const;

  // Returns the first two hex characters: the shard directory name on disk.
  std::string shard() const;

  const Bytes& bytes() const noexcept { return m_bytes; }
  bool is_zero() const noexcept;

  friend auto operator<=>(const Key&, const Key&) = default;
  friend bool operator==(const Key&, const Key&) = default;

 private:
  Bytes m_bytes{};
};

// Hash functor for unordered containers (the key is already uniformly random).
struct KeyHash {
  std::size_t operator()(const Key& key) const noexcept;
};

}  // namespace kcache
