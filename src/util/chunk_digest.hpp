// util/chunk_digest.hpp: the XXH3 digest a file-store payload is fast-checked
// by (FileCheckTable's records), defined by 256 KiB chunks from 1 MiB up so
// that two cores can read and hash the halves of one payload side by side.
//
//   size < k_chunked_digest_min:  xxh3_64(bytes)
//   otherwise:                    xxh3_64(d0 || d1 || ... || d(n-1) || size)
//                                 where di = xxh3_64(chunk i), chunks of
//                                 k_digest_chunk bytes (the last one shorter),
//                                 each di and `size` 8 bytes little-endian.
//
// Like xxh3_64 it is an integrity check against accidental change, never an
// identity (SHA-256 is). Every way of computing it gives the same value: the
// whole buffer at once (chunk_digest), piece by piece in order (ChunkDigest),
// chunk by chunk on two threads (util/copy_hash.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/sha256.hpp"

namespace kcache::util {

inline constexpr std::size_t k_chunked_digest_min = 1024 * 1024;
inline constexpr std::size_t k_digest_chunk = 256 * 1024;

// The digest of `bytes`, as above.
std::uint64_t chunk_digest(std::string_view bytes) noexcept;

// The digest of the `size` bytes whose chunk digests are `chunks` (a multiple
// of 8 bytes, ceil(size / k_digest_chunk) of them); `size` >= k_chunked_digest_min.
std::uint64_t combine_chunk_digests(const std::uint64_t* chunks, std::size_t count, std::uint64_t size) noexcept;

// The digest of `total` bytes given in consecutive pieces of any length.
// Thread-safety: a plain value; one thread at a time.
class ChunkDigest {
 public:
  explicit ChunkDigest(std::uint64_t total) noexcept;
  void update(const void* data, std::size_t size) noexcept;
  // Of the bytes given so far, which must be `total` of them.
  std::uint64_t digest() const noexcept;

 private:
  std::uint64_t m_total;
  bool m_chunked;
  std::size_t m_in_chunk = 0;  // bytes of the current chunk given to m_chunk
  Xxh3 m_chunk;                // the current chunk (or the whole, below the chunked size)
  Xxh3 m_outer;                // the chunk digests so far
};

}  // namespace kcache::util
