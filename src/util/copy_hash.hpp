// util/copy_hash.hpp: copy a large buffer and hash the copy, the hash computed
// on a second core behind the copy.
//
// A verified read of a large payload into memory of the caller's costs a copy
// and a hash of about the same length each (4 MiB: ~90 us each on one core).
// copy_and_xxh3 overlaps them: this thread copies in chunks while a helper
// thread (one per process, started on first use) hashes each chunk once it has
// been copied, so the hash reads the copy (the bytes returned are the bytes
// hashed) while it is still in the cache. When the helper is busy with another
// caller, has not picked the work up by the time the copy is done, or falls
// behind, this thread hashes the rest itself: the result never depends on the
// helper, only the time does.
//
// Thread-safety: thread-safe. After fork() the child starts its own helper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace kcache::util {

// Below this many bytes the copy and the hash are done on this thread: handing
// work to another thread costs more than it saves.
inline constexpr std::size_t k_copy_hash_parallel_min = 512 * 1024;

// Copies `size` bytes from `src` to `dst` (which must not overlap) and returns
// xxh3_64 of the bytes at `dst`. Never fails.
std::uint64_t copy_and_xxh3(char* dst, const char* src, std::size_t size) noexcept;

// Fills `n` bytes at `dst` with the bytes at `offset` of a source (a pread of
// a file); returns 0 or an errno. Must not throw.
using ChunkFill = std::function<int(char* dst, std::size_t offset, std::size_t n)>;

// copy_and_xxh3 with the bytes produced by `fill`, chunk by chunk in order
// (the hash behind the filling, as above). Returns xxh3_64 of the `size` bytes
// at `dst` with `error` 0; when a fill fails, stops there and returns 0 with
// `error` set to what it returned (the bytes at `dst` are then partial).
std::uint64_t fill_and_xxh3(char* dst, std::size_t size, const ChunkFill& fill, int& error) noexcept;

// fill_and_xxh3 that returns util::chunk_digest of the bytes (util/chunk_digest.hpp):
// the same as fill_and_xxh3 below k_chunked_digest_min; from there on the
// chunks are filled and hashed by this thread and the helper side by side,
// each chunk by one of them, so that a read from the page cache (one copy,
// the floor for any reader on one core) is split across two cores. `fill` is
// then called from both threads, on distinct ranges. The bytes returned are
// the bytes hashed; the helper has let go of `dst` before this returns.
std::uint64_t fill_and_chunk_digest(char* dst, std::size_t size, const ChunkFill& fill, int& error) noexcept;

// copy_and_xxh3 with util::chunk_digest of the copy, split as above.
std::uint64_t copy_and_chunk_digest(char* dst, const char* src, std::size_t size) noexcept;

}  // namespace kcache::util
