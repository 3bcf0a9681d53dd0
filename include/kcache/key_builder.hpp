// kcache/key_builder.hpp: canonical, versioned, length-prefixed key encoding.
//
// Encoding (schema version 1), fed to SHA-256 in this order:
//
//   key      := magic schema domain field*
//   magic    := "KCACHE-KEY\0"                       (11 bytes)
//   schema   := u32le(k_key_schema_version)
//   domain   := u32le(len) bytes                      (e.g. "nvrtc", "blob")
//   field    := tag u32le(len(name)) name u64le(len(value)) value
//   tag      := 'v'   value is the literal input (kept verbatim in the record)
//             | 'd'   value is the 32-byte SHA-256 of the input (the record keeps its hex)
//
// Because a content field contributes only its digest, the key can be
// recomputed from the key record alone (`recompute_key`), and two records can
// be compared field by field (`diff`) to explain why a lookup missed.
//
// Fields keep the order in which they are added: callers add them in a fixed
// order, and where order can matter (compiler options) it is part of the input.
//
// Thread-safety: a KeyBuilder is a value; do not share one between threads.
#pragma once

#include <cstdint>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "kcache/key.hpp"

namespace kcache {

inline constexpr std::uint32_t k_key_schema_version = 1;

// One input of a key: its name and either its literal value or the hex SHA-256
// of its content.
struct KeyField {
  std::string name;
  std::string value;
  bool digested = false;  // true: `value` is the hex SHA-256 of the input

  friend bool operator==(const KeyField&, const KeyField&) = default;
};

// Everything that went into a key, in order, plus the domain and schema.
struct KeyRecord {
  std::uint32_t schema = k_key_schema_version;
  std::string domain;
  std::vector<KeyField> fields;

  friend bool operator==(const KeyRecord&, const KeyRecord&) = default;
};

// One difference between two key records.
struct KeyFieldDiff {
  std::string name;
  std::string left;   // empty and `left_present == false` when only on the right
  std::string right;
  bool left_present = true;
  bool right_present = true;
};

// Lists the fields that differ between `a` and `b` (schema and domain first,
// then fields matched by name and occurrence). Empty when the records are equal.
std::vector<KeyFieldDiff> diff(const KeyRecord& a, const KeyRecord& b);

// Recomputes the key of `record`. Returns invalid_argument when a digested
// field does not hold 64 hex characters.
Result<Key> recompute_key(const KeyRecord& record);

class KeyBuilder {
 public:
  // `domain` names the kind of request ("nvrtc", "nvjitlink", "nvvm", "blob", "plan").
  explicit KeyBuilder(std::string_view domain);

  // Adds a short, readable input; the record keeps it verbatim.
  KeyBuilder& add(std::string_view name, std::string_view value);
  KeyBuilder& add(std::string_view name, std::int64_t value);

  // Adds a large or binary input; the key and the record see its SHA-256.
  KeyBuilder& add_content(std::string_view name, std::string_view bytes);

  // Adds an input whose SHA-256 the caller already holds (32 raw bytes).
  KeyBuilder& add_digest(std::string_view name, const std::array<std::uint8_t, 32>& sha256);

  // Returns the key of every field added so far (SHA-256 of the encoding).
  Key key() const;

  // Returns the record of every field added so far.
  const KeyRecord& record() const noexcept { return m_record; }

 private:
  KeyRecord m_record;
};

}  // namespace kcache
