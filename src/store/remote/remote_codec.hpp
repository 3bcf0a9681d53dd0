// store/remote/remote_codec.hpp: one remote object = one whole artifact.
//
// A remote store (Redis, HTTP) holds one object per key, named
// `kcache:v1:<key hex>` (object_name), written with one SET / PUT so that no
// reader ever sees half of one. Grammar, object format version 1
// (docs/remote-format.md):
//
//   object      := header body signature?
//   header      := magic version flags key stream_len body_len signer reserved  (80 bytes)
//   magic       := "KCREMOTE"                                           (8 bytes)
//   version     := u32le(1)
//   flags       := u32le: bit 0 = body is zstd-compressed, bit 1 = signed;
//                  every other bit 0
//   key         := 32 bytes: the key the object is stored under
//   stream_len  := u64le(n): length of the artifact stream, 1 <= n <= max
//   body_len    := u64le(m): length of `body`; equals n when not compressed
//   signer      := 8 bytes: the id of the team key that signed it (TeamKey::id),
//                  zero when unsigned
//   reserved    := 8 zero bytes
//   body        := m bytes: the artifact stream (docs/artifact-format.md), or one
//                  zstd frame whose declared content size is n
//   signature   := 32 bytes, present iff flags bit 1: HMAC-SHA256 under the team
//                  key of every byte before it (header and body)
//
// A reader (decode_object) accepts an object only when every check passes, in
// this order, so that unauthenticated bytes are never decompressed or parsed:
// total size <= max_entry_size; magic; version; flags; header key equals the
// key asked for (a replay under another name fails here); signature, when the
// reader holds team keys (missing signature, unknown signer, wrong HMAC are
// refused); body length; bounded decompression to exactly n bytes; the
// artifact stream (trailer, strict passport, payload size and SHA-256); and
// verify_object (the passport's key and the key recomputed from its key
// record both equal the key asked for).
//
// Thread-safety: free functions on values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "store/remote/team_key.hpp"

namespace kcache::remote {

inline constexpr std::uint32_t k_remote_object_version = 1;
inline constexpr std::size_t k_remote_header_bytes = 80;
inline constexpr std::size_t k_remote_signature_bytes = 32;
inline constexpr std::uint64_t k_remote_default_max_entry_size = std::uint64_t{256} << 20;

enum class Compression { none, zstd };

// Why an object was refused; each reason has its own counter.
enum class Rejection {
  too_large,      // larger than max_entry_size
  malformed,      // bad magic, version, flags, lengths, truncated, bad zstd frame
  wrong_key,      // stored under a name that is not its key (replayed), or its key record does not recompute
  unsigned_entry, // the reader holds team keys and the object carries no signature
  unknown_signer, // signed with a key the reader does not hold
  bad_signature,  // the HMAC does not match (bytes changed after signing)
  corrupt,        // the artifact stream or its passport failed a check (digest, strict parse)
};
std::string_view to_string(Rejection r) noexcept;

struct CodecOptions {
  Compression compression = Compression::zstd;
  int zstd_level = 1;
  // Writers sign with `sign` when set. Readers require a signature by one of
  // `read` (plus `sign`) whenever either is set; with no key at all, objects
  // are accepted unsigned and a signature is not checked.
  std::optional<TeamKey> sign;
  std::vector<TeamKey> read;
  std::uint64_t max_entry_size = k_remote_default_max_entry_size;
};

// What decode_object refused, and why (one line naming the check).
struct RejectedObject {
  Rejection reason = Rejection::malformed;
  std::string message;
};

// "kcache:v1:<64 hex>".
std::string object_name(const Key& key);
// "kcache:v1:lease:<64 hex>": the cross-host lease of a key (docs/remote-format.md).
std::string lease_name(const Key& key);

// The pieces of the format shared with the streamed writer and reader
// (object_stream.hpp), which move large objects in parts.
inline constexpr std::uint32_t k_remote_flag_zstd = 1U << 0;
inline constexpr std::uint32_t k_remote_flag_signed = 1U << 1;
// The 80 header bytes of an object (signer: options.sign's id when set).
std::string encode_object_header(std::uint32_t flags, const Key& key, std::uint64_t stream_len, std::uint64_t body_len,
                                 const CodecOptions& options);
// The team key of `options` whose id is the 8 bytes at `id`; null when none.
const TeamKey* find_signer(const CodecOptions& options, const char* id);

// What the header of an object announces, once parse_object_header accepted it.
struct ObjectHeader {
  bool compressed = false;        // flags bit 0
  bool is_signed = false;         // flags bit 1
  std::uint64_t stream_len = 0;
  std::uint64_t body_len = 0;
  std::uint64_t object_len = 0;   // header + body + signature
  // The team key the signature must match: set iff the reader holds team keys.
  const TeamKey* signer = nullptr;
};

// The checks of an object's 80 header bytes `header` that come before its
// signature (the one place both readers, decode_object and ObjectDecoder, make
// them), in this order: magic; version; flags; the header key equals
// `expected`; an unsigned object names no signer; reserved bytes zero; the
// announced length: equal to `object_size` when the whole object is at hand
// (else malformed), or, while it is still arriving (`object_size` empty),
// within max_entry_size (else too_large); and, when the reader holds team
// keys, a signature by one of them (unsigned_entry, unknown_signer).
// REQUIRES: header.size() == k_remote_header_bytes.
// Success: the header's fields. Failure: the first check that failed.
tl::expected<ObjectHeader, RejectedObject> parse_object_header(std::string_view header, const Key& expected,
                                                               const CodecOptions& options,
                                                               std::optional<std::uint64_t> object_size);

// The checks of an accepted header that come after its signature was
// verified: the stream length within 1..max_entry_size (too_large), and an
// uncompressed body as long as its stream (malformed). Success: {}.
tl::expected<void, RejectedObject> check_object_lengths(const ObjectHeader& header, const CodecOptions& options);
// Whether a large stream is worth compressing whole: false when its first
// MiB (`sample`) does not compress (an engine's weights, packed data).
bool worth_compressing(std::string_view sample, const CodecOptions& options);

// Encodes `artifact` as an object stored under its passport's key. Never fails.
std::string encode_object(const Artifact& artifact, const CodecOptions& options);

// Decodes and verifies in full (see the order above) an object fetched under
// `expected`. Success: the artifact, verified (payload SHA-256 checked).
// Failure: the first check that failed.
tl::expected<Artifact, RejectedObject> decode_object(std::string_view bytes, const Key& expected,
                                                     const CodecOptions& options);

// The identity check of a downloaded artifact: check_entry_identity (the
// passport names `expected`, its key record recomputes to it, kind and content
// digest bound), as for every local read. Success: {}.
// Failure: `corrupt` naming the mismatch. This is the one place the remote
// tier decides that an entry is what its key says.
Result<void> verify_object(const Artifact& artifact, const Key& expected);

}  // namespace kcache::remote
