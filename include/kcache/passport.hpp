// kcache/passport.hpp: the metadata stamped on every artifact.
//
// A passport says what an artifact is, where it came from and how to check it.
// Readers and loaders verify it before they trust the payload. Serialised as
// one JSON object (format version 1); docs/passport.md gives the grammar:
//
//   passport := {
//     "format": 1,                         required, integer, must equal 1
//     "key": HEX64,                        required
//     "key_record": { "schema": 1, "domain": KIND,          required, all three
//                     "fields": [ { "name": str, "value": str, "digest": bool } ...1+ ] },
//     "kind": str,                         required, [a-z0-9_-]{1,32}
//     "producer": { "name": str, "version": str },    required, both
//     "target": { "arch": str, "host": str },         required, both
//     "payload": { "size": u64, "sha256": HEX64 },   required, both
//     "created_unix_ms": i64,              required
//     "compile_duration_us": u64,          required
//     "log": str,                          required
//     "symbols": { str: str ... },         required; name expression -> lowered name
//     "labels": { str: str ... }           required
//   }
//
// The parser is strict: every member above is required, at every depth; an
// unknown or repeated member, a wrong type, an empty key_record.fields, a
// key_record.schema other than k_key_schema_version, a domain or kind outside
// [a-z0-9_-]{1,32}, a document larger than k_passport_max_bytes, or more than
// k_passport_max_entries map or list entries are rejected as `corrupt`; a newer
// `format` is refused as `unsupported` before any other member is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"

namespace kcache {

inline constexpr int k_passport_format_version = 1;
inline constexpr std::size_t k_passport_max_bytes = std::size_t{8} << 20;  // 8 MiB
inline constexpr std::size_t k_passport_max_entries = 65536;
inline constexpr std::size_t k_passport_max_log_bytes = std::size_t{4} << 20;  // logs are truncated to this

// Who made the artifact: "nvrtc" "13.0", "kcache" "0.1.0", "trtexec" "10.3".
struct Producer {
  std::string name;
  std::string version;
  friend bool operator==(const Producer&, const Producer&) = default;
};

// What it runs on: the arch ("sm_90a", "compute_90") and a host fingerprint.
struct Target {
  std::string arch;
  std::string host;
  friend bool operator==(const Target&, const Target&) = default;
};

struct Passport {
  int format = k_passport_format_version;
  Key key;
  KeyRecord key_record;
  std::string kind;  // "ptx" "cubin" "ltoir" "fatbin" "nvvm" "engine" "onnx" "blob"
  Producer producer;
  Target target;
  std::uint64_t payload_size = 0;
  std::string payload_sha256;  // 64 lowercase hex
  std::int64_t created_unix_ms = 0;
  std::uint64_t compile_duration_us = 0;
  std::string log;
  std::map<std::string, std::string> symbols;
  std::map<std::string, std::string> labels;

  // Serialises to compact JSON. Never fails.
  std::string to_json() const;
  // Serialises to indented JSON for people (`kcache show`).
  std::string to_pretty_json() const;

  // Parses and validates `text` (strictly, see the grammar above). Returns
  // `corrupt` with a reason on any violation; never throws.
  static Result<Passport> from_json(std::string_view text);

  friend bool operator==(const Passport&, const Passport&) = default;
};

// Returns true when `kind` is a well-formed kind name: [a-z0-9_-]{1,32}.
bool is_valid_kind(std::string_view kind) noexcept;

// The key-record domain of content-addressed entries (`kcache put`, make_blob):
// their record is exactly [ "kind" = passport.kind, "content" = digest of the
// payload ], so the key names the payload itself.
inline constexpr std::string_view k_blob_domain = "blob";

// Checks that `passport` is what a writer of the entry `asked` would have
// stamped, as far as the key can tell:
// - `passport.key` is `asked`;
// - the key recomputed from `passport.key_record` (recompute_key) is `asked`,
//   so the record is the one the key was made from;
// - the first literal field "kind" or "target_kind" of the record, if any,
//   equals `passport.kind`;
// - for a content-addressed entry (domain k_blob_domain) the record holds
//   exactly the fields "kind" (literal, equal to `passport.kind`) and "content"
//   (digest, equal to `passport.payload_sha256`): a payload swapped together
//   with an edited payload.sha256 changes the key and never passes.
// It does not hash the payload: callers also check the payload against
// `payload.sha256` (Artifact::verify, FileStore reads). Every reader of entries
// from outside the process (FileStore::get, `kcache verify`, Artifact::verify
// and so every put, the worker protocol, remote tiers) calls it.
// Returns `corrupt` naming the first mismatch. Thread-safe; never throws.
Result<void> check_entry_identity(const Key& asked, const Passport& passport);

}  // namespace kcache
