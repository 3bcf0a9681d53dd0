// store/file_check_table.hpp: the record of payloads verified in full, which
// lets later reads (in any process) use a cheap check instead of SHA-256.
//
// The file v1/stats/checks (format version 1, docs/on-disk-format.md) is mapped
// MAP_SHARED; each slot says "this key's payload, with this inode, size, mtime
// and ctime, had this XXH3 and matched this SHA-256 (prefix) when it was last
// hashed in full":
//
//   checks := header slot[N]                     64 + N * 96 bytes
//   header := "KCCHK001" u32 version(=1) u32 slots(=N) u64 reserved[6]
//   slot   := key[32] ino u64 size u64 mtime_ns u64 ctime_ns u64 xxh3 u64
//             sha256_prefix u64 seal u64 pad u64
//   seal   := XXH3-64 of the 80 bytes before it, XOR k_seal_salt
//
// N is a power of two from 64 to 65536, sized with the cache's cap by the
// process that creates the file (slots_for_cap: one slot per 16 KiB of cap, so
// the table is about 0.6 % of the cap at most; 6 KiB for a 1 MiB cap, 6 MiB
// from a 1 GiB cap up) and read from the header by every other process.
//
// A slot index is bytes 2..3 of the key modulo N; a colliding key simply
// overwrites the slot (the table is a cache, not a source of truth). Words are
// written with relaxed atomics by any process; a torn slot fails its seal and
// reads as absent. A record never proves anything by itself: a cheap read
// still hashes the bytes it read with XXH3 and compares, and the inode and
// ctime bind the record to one unmodified file (any write or metadata change of
// the payload changes its ctime).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>

#include "kcache/key.hpp"

namespace kcache::store {

struct CheckRecord {
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::uint64_t mtime_ns = 0;
  std::uint64_t ctime_ns = 0;
  std::uint64_t xxh3 = 0;
  std::uint64_t sha256_prefix = 0;

  static CheckRecord from_stat(const struct stat& st, std::uint64_t xxh3, std::uint64_t sha256_prefix) noexcept;
  friend bool operator==(const CheckRecord&, const CheckRecord&) = default;
};

class FileCheckTable {
 public:
  static constexpr unsigned k_min_slots = 64;
  static constexpr unsigned k_max_slots = 65536;
  static constexpr std::uint64_t k_cap_bytes_per_slot = 16 * 1024;
  static constexpr std::size_t k_slot_bytes = 96;
  static constexpr std::size_t k_header_bytes = 64;

  // The slot count for a cache capped at `cap_bytes` (0: no cap, the largest).
  static unsigned slots_for_cap(std::uint64_t cap_bytes) noexcept;
  static constexpr std::size_t file_size(unsigned slots) noexcept { return k_header_bytes + slots * k_slot_bytes; }

  // Opens `checks` in `stats_dir_fd` with the slot count its header gives, or
  // creates it with `slots` (a power of two in [k_min_slots, k_max_slots]) when
  // it is missing or damaged. Returns null when the table cannot be used (then
  // every read hashes in full).
  static std::unique_ptr<FileCheckTable> open(int stats_dir_fd, mode_t mode, unsigned slots);

  // The size of the mapped file in bytes (metadata counted in stats).
  std::size_t bytes() const noexcept { return file_size(m_slots); }
  ~FileCheckTable();
  FileCheckTable(const FileCheckTable&) = delete;
  FileCheckTable& operator=(const FileCheckTable&) = delete;

  // Returns true and fills `out` when the slot of `key` holds a sealed record for `key`.
  bool find(const Key& key, CheckRecord& out) const noexcept;
  void record(const Key& key, const CheckRecord& rec) noexcept;
  void forget(const Key& key) noexcept;

 private:
  FileCheckTable(void* mapped, unsigned slots) : m_mapped(mapped), m_slots(slots) {}
  std::uint64_t* slot(const Key& key) const noexcept;
  void* m_mapped;
  unsigned m_slots;
};

// The first 8 bytes of a 64-hex SHA-256, as a number; 0 when `hex` is malformed.
std::uint64_t sha256_prefix_of_hex(std::string_view hex) noexcept;

}  // namespace kcache::store
