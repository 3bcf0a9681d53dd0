// store/file/shared_counters.hpp: counters and size accounting shared by every
// process that uses one cache directory.
//
// The file v1/stats/counters (format version 1, docs/on-disk-format.md) is
// mapped MAP_SHARED and updated with lock-free 64-bit atomics, so any number of
// processes count hits, misses, ... into the same words without a lock:
//
//   counters := header counter[16] shard[256] room[128] padding   8192 bytes in all
//   header   := "KCCNT001" u32 version(=1) u32 shard_count(=256) u64 reserved[6]
//   counter  := u64                     in the order of Counter below (slots 10 and
//                                       11 are the pinned bytes and entries); the last
//                                       slot (15) is the eviction hand
//   shard    := i64 bytes i64 entries   complete entries (payload + passport)
//   room     := u64 owner u64 bytes     a put in flight: `bytes` it will add, and
//                                       its writer (pid << 32 | sequence); 0 0 when free
//
// Room slots let writers reserve the size of an entry before staging it, so
// that entries in flight count against the cap (docs/on-disk-format.md, "Size
// cap"). A slot whose writer process is gone is reclaimed. Files made before
// room slots existed hold zeros there, which read as free slots.
//
// Shard words are changed only by a process that holds the shard directory's
// flock (publish, remove, evict, recount), so a recount under that lock can set
// them exactly. All values are native-endian: the file is not portable between
// machines, and is rebuilt (counters zeroed, sizes recounted) when its header
// does not match.
//
// When the file cannot be created or mapped (read-only, no space, permission
// denied), the counters live in this process only and shared() is false.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <sys/types.h>

namespace kcache::store {

enum class Counter : unsigned {
  hits, misses, puts, puts_skipped, evictions, corrupt, errors,
  bytes_read, bytes_written, compile_us_saved,
  // Pinned entries (FileStore::pin) and their bytes (payload + passport):
  // changed under the entry's shard lock as pins come and go, set by a full
  // recount (prune, verify with repair, a new counters file).
  pinned_bytes, pinned_entries,
  count_
};

class SharedCounters {
 public:
  static constexpr std::size_t k_file_size = 8192;
  static constexpr unsigned k_counter_slots = 16;
  static constexpr unsigned k_shards = 256;

  // Opens or creates `counters` in the directory `stats_dir_fd` with `mode`.
  // Never fails: falls back to process-local counters.
  static std::unique_ptr<SharedCounters> open(int stats_dir_fd, mode_t mode);
  ~SharedCounters();
  SharedCounters(const SharedCounters&) = delete;
  SharedCounters& operator=(const SharedCounters&) = delete;

  void add(Counter counter, std::uint64_t value = 1) noexcept;
  // Subtracts `value` (never below 0 as read by get()).
  void sub(Counter counter, std::uint64_t value = 1) noexcept;
  void set(Counter counter, std::uint64_t value) noexcept;
  std::uint64_t get(Counter counter) const noexcept;

  // REQUIRES: the caller holds the shard's flock.
  void shard_add(unsigned shard, std::int64_t bytes, std::int64_t entries) noexcept;
  void shard_set(unsigned shard, std::int64_t bytes, std::int64_t entries) noexcept;

  std::uint64_t shard_bytes(unsigned shard) const noexcept;
  std::uint64_t shard_entries(unsigned shard) const noexcept;
  std::uint64_t total_bytes() const noexcept;
  std::uint64_t total_entries() const noexcept;

  static constexpr unsigned k_room_slots = 128;

  // The eviction hand: the shard where the next eviction step starts, shared
  // by every process so that steps visit the shards in turn. Files made before
  // the hand existed hold 0 there. REQUIRES: the evict lock (for set).
  unsigned evict_hand() const noexcept;
  void set_evict_hand(unsigned shard) noexcept;

  // Takes a room slot for a put in flight that will add `bytes`, owned by this
  // process. Returns the slot, or -1 when every slot is taken.
  int reserve_room(std::uint64_t bytes) noexcept;
  // Frees a slot taken by reserve_room (no-op for -1).
  void release_room(int slot) noexcept;
  // The bytes reserved by puts in flight, in every process.
  std::uint64_t reserved_bytes() const noexcept;
  // Frees the slots of writer processes that no longer exist. Returns the bytes freed.
  std::uint64_t reclaim_dead_rooms() noexcept;

  // True when the counters are the shared file, false when process-local.
  bool shared() const noexcept { return m_mapped != nullptr; }
  // True when the file was created or rebuilt by this open: sizes need a recount.
  bool fresh() const noexcept { return m_fresh; }

 private:
  SharedCounters() = default;
  std::uint64_t* word(std::size_t index) const noexcept;

  void* m_mapped = nullptr;
  bool m_fresh = false;
  std::unique_ptr<std::uint64_t[]> m_local;  // used when m_mapped is null
};

}  // namespace kcache::store
