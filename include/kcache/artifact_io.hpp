// kcache/artifact_io.hpp: an artifact as a self-contained byte stream.
//
// The serialised form carries everything an Artifact holds (payload and the
// whole passport: key record, log, symbol map, labels, compile duration), so it
// can cross a pipe, a socket or a file and be rebuilt in another process with
// nothing lost. It is the boundary between compile workers and their callers
// (docs/worker-protocol.md) and the form of `kcache get --artifact` style
// exports. Grammar, version 1 (docs/artifact-format.md):
//
//   artifact := header passport payload trailer
//   header   := magic version passport_len payload_len        (24 bytes)
//   magic    := "KCART\r\n\x1a"                                (8 bytes)
//   version  := u32le(k_artifact_stream_version)              (= 1)
//   passport_len := u32le(n)   1 <= n <= k_passport_max_bytes
//   payload_len  := u64le(m)   m <= the reader's max_payload_bytes
//   passport := n bytes: the passport JSON (docs/passport.md)
//   payload  := m bytes: the raw payload
//   trailer  := u64le(XXH3-64 of header passport payload)
//
// A reader accepts a stream only when every check passes, in this order:
// magic, version, bounds, all bytes present, trailer, strict passport parse,
// and Artifact::verify() (size and SHA-256 of the payload against the
// passport). Anything else is `corrupt` with the reason; a reader never
// allocates more than the bytes that actually arrived plus a bounded chunk, so
// a lying length cannot exhaust memory.
//
// Thread-safety: free functions on values; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"

namespace kcache {

inline constexpr std::uint32_t k_artifact_stream_version = 1;
inline constexpr std::size_t k_artifact_stream_header_bytes = 24;
inline constexpr std::size_t k_artifact_stream_trailer_bytes = 8;
// The default cap on payload size for readers: 4 GiB.
inline constexpr std::uint64_t k_artifact_max_payload_bytes = std::uint64_t{4} << 30;

// The header of a stream, for writers and readers that move a stream in
// parts (the remote tier's large objects, store/remote/object_stream.hpp).
struct ArtifactStreamHeader {
  std::uint32_t passport_len = 0;
  std::uint64_t payload_len = 0;
};
// The 24 header bytes of a stream with these lengths.
std::string encode_artifact_header(std::uint32_t passport_len, std::uint64_t payload_len);
// Parses and bounds-checks the 24 header bytes `header` (magic, version,
// 1 <= passport_len <= k_passport_max_bytes, payload_len <= `max_payload_bytes`).
// Failure: `corrupt` naming the check.
Result<ArtifactStreamHeader> decode_artifact_header(std::string_view header, std::uint64_t max_payload_bytes);

// Returns the serialised form of `artifact`. Never fails; the artifact is
// written as it is (call verify() first if it may be inconsistent).
std::string encode_artifact(const Artifact& artifact);

// Parses exactly one serialised artifact that fills all of `bytes`.
// Returns `corrupt` naming the first failed check (including trailing bytes).
Result<Artifact> decode_artifact(std::string_view bytes,
                                 std::uint64_t max_payload_bytes = k_artifact_max_payload_bytes);

// Writes the serialised form of `artifact` to the blocking descriptor `fd`
// (a pipe, socket or file), retrying short writes and EINTR. Returns io on a
// write error (EPIPE when the reader went away). Does not close `fd`.
Result<void> write_artifact(int fd, const Artifact& artifact);

// Reads exactly one serialised artifact from the blocking descriptor `fd`,
// leaving any bytes after it unread. Returns `corrupt` on garbage, a
// truncated stream (end of file inside the artifact) or a failed check, and io
// on a read error. Does not close `fd`.
Result<Artifact> read_artifact(int fd, std::uint64_t max_payload_bytes = k_artifact_max_payload_bytes);

// Writes `artifact` to `path` atomically: a temporary file in the same
// directory, fsync, rename. The file mode is 0600. Returns io / no_space /
// permission_denied on failure, leaving no temporary file behind.
Result<void> write_artifact_file(const std::filesystem::path& path, const Artifact& artifact);

// Reads a file written by write_artifact_file (not following a symlink at
// `path`). Returns not_found when it does not exist, `corrupt` as read_artifact.
Result<Artifact> read_artifact_file(const std::filesystem::path& path,
                                    std::uint64_t max_payload_bytes = k_artifact_max_payload_bytes);

}  // namespace kcache
