// store/file/file_check_table.hpp: the record of payloads verified in full, which
// lets later reads (in any process) use a cheap check instead of SHA-256.
//
// The file v1/stats/checks (format version 1, docs/on-disk-format.md) is mapped
// MAP_SHARED; each slot says "this key's payload, with this inode, size, mtime
// and ctime, had this XXH3 and matched this SHA-256 (prefix) when it was last
// hashed in full":
//
//   checks   := header slot[N]                   64 + N * 96 bytes
//   header   := "KCCHK001" u32 version(=1) u32 slots(=N) u64 replaced
//               u64 reserved[5]
//   replaced := 0, or 1 once a larger table has taken this file's place
//   slot     := key[32] ino u64 size u64 mtime_ns u64 ctime_ns u64 xxh3 u64
//               sha256_prefix u64 seal u64 pad u64
//   seal     := XXH3-64 of the 80 bytes before it, XOR k_seal_salt
//
// N is a power of two from 32 to 65536 (kcache before tables grew made 64 or
// more, and reads a 32-slot table as damaged: it replaces it with its own). The table grows with use, not with
// the cap: a new table has k_min_slots (3 KiB), and fit() replaces it with a
// table of at least twice as many slots as the cache holds entries, up to
// slots_for_cap (one slot per 16 KiB of cap; 6 MiB from a 1 GiB cap up), so
// an empty or small cache pays for a small table. A larger table is written
// in full beside the old one (with the old records that still seal), put in
// place by exchanging names, and the old file's `replaced` word is set: every
// process that maps it sees the word on its next lookup and maps the new one.
// Files written before `replaced` existed hold 0 there (and are used at their
// size). Processes read N from the header, whatever their own cap.
//
// A key's home slot is bytes 2..3 of the key modulo N, and its record lives
// in one of the eight slots of the aligned set that holds home (home looked
// at first): keys that share a home no longer evict each other (with one slot
// a key, 17-31 % of reads in random order of a table a quarter to half full
// found another key's record and hashed in full; with sets of eight,
// 0.05-1.5 %). A ninth key in a full set overwrites one of the eight (the
// table is a cache, not a source of truth); kcache before sets reads home
// only and finds the others absent. Words are
// written with relaxed atomics by any process; a torn slot fails its seal and
// reads as absent. A record never proves anything by itself: a cheap read
// still hashes the bytes it read with XXH3 and compares, and the inode and
// ctime bind the record to one unmodified file (any write or metadata change of
// the payload changes its ctime).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

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
  static constexpr unsigned k_min_slots = 32;  // 3 KiB: one 4 KiB block
  static constexpr unsigned k_max_slots = 65536;
  static constexpr std::uint64_t k_cap_bytes_per_slot = 16 * 1024;
  static constexpr std::size_t k_slot_bytes = 96;
  static constexpr std::size_t k_header_bytes = 64;
  static constexpr std::size_t k_replaced_offset = 16;
  // A key's record lives in one of the k_ways slots of its set (see above).
  static constexpr unsigned k_ways = 8;

  // The largest slot count for a cache capped at `cap_bytes` (0: no cap, the largest).
  static unsigned slots_for_cap(std::uint64_t cap_bytes) noexcept;
  // The slot count fit() grows to for `entries` entries under `max_slots`:
  // the smallest power of two at least 2 * entries, in [k_min_slots, max_slots].
  static unsigned slots_for_entries(std::uint64_t entries, unsigned max_slots) noexcept;
  static constexpr std::size_t file_size(unsigned slots) noexcept { return k_header_bytes + slots * k_slot_bytes; }

  // Opens `checks` in `stats_dir_fd` with the slot count its header gives, or
  // creates it with k_min_slots when it is missing or damaged. The table
  // never grows past `max_slots` (slots_for_cap of this process's cap; an
  // existing larger table is used as it is). Returns null when the table
  // cannot be used (then every read hashes in full).
  // With TableFile::on_first_use (a stats directory made just now, which
  // holds no table yet) nothing is opened or created here: the first find,
  // record or forget maps the table another process made meanwhile or creates
  // it (at the size fit() asked for), so a process that never checks a
  // payload (a cold compile into a new cache directory) makes no table file.
  // Until then bytes() and slots() are 0.
  // REQUIRES: `stats_dir_fd` stays open while the table lives (it is borrowed).
  enum class TableFile { now, on_first_use };
  static std::unique_ptr<FileCheckTable> open(int stats_dir_fd, mode_t mode, unsigned max_slots,
                                              TableFile when = TableFile::now);

  // Grows the table when it has fewer than slots_for_entries(`entries`)
  // slots: writes the larger table, keeps the records that seal, and puts it
  // in place for every process. Cheap when no growth is due (two loads).
  // A failure (no space, read-only) leaves the current table in use.
  void fit(std::uint64_t entries) noexcept;

  // The size of the current table file in bytes (metadata counted in stats); 0 before it is made.
  std::size_t bytes() const noexcept {
    const Mapping* m = mapped();
    return m != nullptr ? file_size(m->slots) : 0;
  }
  // The current slot count; 0 before the table is made.
  unsigned slots() const noexcept {
    const Mapping* m = mapped();
    return m != nullptr ? m->slots : 0;
  }
  ~FileCheckTable();
  FileCheckTable(const FileCheckTable&) = delete;
  FileCheckTable& operator=(const FileCheckTable&) = delete;

  // Returns true and fills `out` when a slot of `key`'s set holds a sealed record for `key`.
  bool find(const Key& key, CheckRecord& out) const noexcept;
  void record(const Key& key, const CheckRecord& rec) noexcept;
  void forget(const Key& key) noexcept;

 private:
  struct Mapping {
    void* data = nullptr;
    unsigned slots = 0;
  };
  FileCheckTable(int dir_fd, mode_t mode, unsigned max_slots, Mapping first);
  // The mapping in use: the newest one, after following a `replaced` flag;
  // a table opened TableFile::on_first_use is mapped (or made) here first.
  // Null only when it can be neither mapped nor made (then nothing is recorded).
  const Mapping* current() const noexcept;
  // The mapping in use without making one: null before the first current().
  const Mapping* mapped() const noexcept;
  // Maps the table in place, or creates it: the first current() of a lazy table.
  const Mapping* map_or_make() const noexcept;
  // Maps the file now in place when `seen` has been replaced. Returns the mapping to use.
  const Mapping* follow(const Mapping* seen) const noexcept;
  static std::uint64_t* slot(const Mapping& m, unsigned index) noexcept;

  int m_dir_fd;
  mode_t m_mode;
  unsigned m_max_slots;
  mutable std::mutex m_mutex;  // guards m_mappings and growing
  // Every mapping this table made, oldest first, unmapped with the table (a
  // thread may still be reading an older one; there are at most a few: each
  // growth at least doubles the table).
  mutable std::deque<Mapping> m_mappings;  // a deque: push_back keeps pointers to the others valid
  mutable std::atomic<const Mapping*> m_current{nullptr};
  // What fit() asked for before the table was made (TableFile::on_first_use):
  // the size it is made at.
  std::atomic<unsigned> m_unmade_slots{k_min_slots};
};

// The first 8 bytes of a 64-hex SHA-256, as a number; 0 when `hex` is malformed.
std::uint64_t sha256_prefix_of_hex(std::string_view hex) noexcept;

}  // namespace kcache::store
