// kcache/store.hpp: where artifacts live.
//
// A Store maps keys to artifacts. Implementations: MemoryStore (LRU in this
// process), FileStore (on disk, shared between processes), and TieredStore
// (a chain of stores, fastest first). Remote stores come later.
//
// Contracts shared by every implementation:
// - get() returns the artifact on a hit, std::nullopt on a miss, and an Error
//   only when the store itself cannot be read (permission denied, I/O error).
//   A damaged entry is a miss, never an error and never returned: it is
//   counted in `corrupt` and removed. An entry read from outside the process
//   is returned only when its passport passes check_entry_identity(key, ...)
//   (kcache/passport.hpp) and its payload matches payload.sha256.
// - put() returns `stored`, or `already_present` when an entry for the key
//   exists (a success: the content of a key never changes), or `queued` from a
//   store that publishes later (WriteBehindStore: its get() already returns
//   the artifact in this process). It fails only when the artifact does not
//   verify or the store cannot be written.
// - Every method is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"

namespace kcache {

class RequestStats;  // kcache/request_stats.hpp

// The kind of tier a store is, as `kcache stats` counts where the artifacts of
// requests were served from: this process's memory, the cache directory on
// disk, a read-only bundle file, or a team remote.
enum class Tier : unsigned { memory, disk, bundle, remote };
inline constexpr unsigned k_tier_count = 4;
// Returns "memory", "disk", "bundle", "remote".
std::string_view to_string(Tier tier) noexcept;
// The Tier named by `name` (as to_string spells it), or std::nullopt.
std::optional<Tier> parse_tier(std::string_view name) noexcept;

enum class PutOutcome {
  stored,           // written (and published) by this call
  already_present,  // an entry for the key was there already
  queued,           // accepted; a background thread publishes it (WriteBehindStore)
};

// Receives the outcome of one put once it is final: the entry is published
// (visible to other processes) or the put failed. See Store::put_then.
using PutDone = std::function<void(const Result<PutOutcome>&)>;

// What list() reports of one entry.
struct EntryInfo {
  Key key;
  std::string kind;
  std::uint64_t payload_size = 0;
  std::int64_t created_unix_ms = 0;
  std::int64_t last_used_unix_ms = 0;  // 0 where the store does not track use
  bool pinned = false;                 // FileStore: pinned (never evicted by the cap)
};

// Counters of a store. For FileStore they are shared by every process using
// the same cache directory; for MemoryStore they belong to the instance.
struct StoreStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;            // entries written
  std::uint64_t puts_skipped = 0;    // writes skipped because the store is degraded
  std::uint64_t evictions = 0;
  std::uint64_t corrupt = 0;         // damaged entries found (and removed)
  std::uint64_t errors = 0;          // failed operations (I/O, permissions, space)
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t entries = 0;         // entries held now
  std::uint64_t size_bytes = 0;      // bytes held now (payload + passport)
  std::uint64_t metadata_bytes = 0;  // FileStore: shared counters and check table, also under the cap
  std::uint64_t max_size_bytes = 0;  // the cap; 0 = none
  std::uint64_t compile_us_saved = 0;  // sum of compile_duration_us over hits
  // FileStore: files in v1/tmp (puts in flight, and leftovers of writers that
  // are gone) and their bytes; of them, the stale ones (writer gone, or older
  // than stale_temp_age when the writer cannot be judged) that a sweep removes.
  std::uint64_t temp_files = 0;
  std::uint64_t temp_bytes = 0;
  std::uint64_t stale_temp_files = 0;
  std::uint64_t stale_temp_bytes = 0;
  // FileStore: pinned entries (never evicted) and their bytes, part of
  // entries / size_bytes; pins_over_cap when pinned entries alone fill what
  // the cap leaves for entries (puts are then refused, not stored past the cap).
  std::uint64_t pinned_entries = 0;
  std::uint64_t pinned_bytes = 0;
  bool pins_over_cap = false;
  bool remote = false;  // a remote tier: its counters are this process's, it reports no occupancy
};

// Memory that a caller lends for the bytes of a payload a store reads
// (Store::get_into): `data` has room for the payload's size plus one byte (the
// NUL that Payload::c_str promises), and stays valid while `owner` lives. A
// null `data` declines: the store then uses memory of its own.
struct PayloadBuffer {
  std::shared_ptr<const void> owner;
  char* data = nullptr;
};

// Lends memory for a payload of `size` bytes. Called with no lock of the
// store held, possibly more than once per get (each buffer not used is
// released by dropping its owner), from the thread that called get_into.
using PayloadAllocator = std::function<PayloadBuffer(std::size_t size)>;

class Store {
 public:
  virtual ~Store() = default;

  // A short name for logs and stats: "memory", "file", "tiered".
  virtual std::string_view name() const noexcept = 0;

  // False for a store that never takes puts (a read-only remote tier):
  // TieredStore does not offer it puts at all. Default: true.
  virtual bool writable() const noexcept { return true; }

  // True for the store of a cache that is turned off (KCACHE_DISABLE,
  // `disable = true`): it never hits and keeps nothing, so compile() and
  // Cache::get_or_compile compile straight through it, as without a store
  // (compile_without_cache: no key is derived). Default: false.
  virtual bool disabled() const noexcept { return false; }

  // The kind of tier this store is (memory, disk, bundle, remote), or
  // std::nullopt for a store that is no tier itself (a chain of them, the
  // disabled store). A wrapper (WriteBehindStore) answers for what it wraps.
  // Default: std::nullopt.
  virtual std::optional<Tier> tier_kind() const noexcept { return std::nullopt; }

  // The request counters of the cache directory behind this store
  // (kcache/request_stats.hpp), where Cache::get_or_compile and compile()
  // count the requests that go through it; nullptr for a store with no cache
  // directory (a memory or remote store alone). Owned by the store, valid
  // while it lives. Default: nullptr.
  virtual RequestStats* request_stats() noexcept { return nullptr; }

  // The tier that served the hit last returned by a get() or get_into() of a
  // chain on this thread (TieredStore, and WriteBehindStore for a hit from
  // its queue, note it); std::nullopt after a miss, or when the last get()
  // went to a store that notes nothing (a single tier: ask its tier_kind()).
  // Reset with note_served_tier(std::nullopt) before a get() to read it
  // after. Thread-safe (the value is per thread).
  static std::optional<Tier> last_served_tier() noexcept;
  static void note_served_tier(std::optional<Tier> tier) noexcept;

  virtual Result<std::optional<Artifact>> get(const Key& key) = 0;

  // get(), with the payload's bytes copied into memory from `allocate` where
  // this store copies them anyway (FileStore: payloads it reads from disk of
  // FileStore::k_map_min_bytes or more), so that a caller who needs the bytes
  // in memory of its own (a Python bytes object) gets them without a second
  // copy. The bytes are checked in that memory, after the copy. Hits, misses,
  // errors and counters are those of get(); a payload the store already holds
  // in memory (MemoryStore) is returned as it is. An empty `allocate` is get().
  // Default: get().
  virtual Result<std::optional<Artifact>> get_into(const Key& key, const PayloadAllocator& allocate) {
    (void)allocate;
    return get(key);
  }

  // get(), as one shared and immutable artifact: null on a miss. A store
  // that keeps artifacts in this process's memory (MemoryStore, the queue of
  // a WriteBehindStore) returns the one it holds, with no copy of its
  // passport (the single-flight cache's hits from memory take this); a chain
  // (TieredStore, WriteBehindStore) asks its stores the same way. Hits,
  // misses, errors and counters are those of get(). The object is made
  // non-const (std::make_shared<Artifact>): one whose last owner is the
  // caller may be moved from (Cache::get_or_compile does). Default: get(),
  // moved into one.
  virtual Result<std::shared_ptr<const Artifact>> get_shared(const Key& key);
  virtual Result<PutOutcome> put(const Artifact& artifact) = 0;

  // Stores an artifact that another store has just returned from get(), so
  // its payload was checked against its passport moments ago (TieredStore
  // filling an upper tier). A store may skip re-hashing the payload; it still
  // refuses a malformed passport or a size mismatch. Default: put().
  virtual Result<PutOutcome> fill(const Artifact& artifact) { return put(artifact); }

  // put(), plus a callback: `done` is called exactly once with the final
  // outcome, after the entry is published where other processes can see it
  // (or once the put has failed). Returns what put() returns. A store that
  // publishes in the background (WriteBehindStore) returns `queued` and calls
  // `done` later, from its own thread; the default calls put() and then
  // `done` on this thread, before returning. The single-flight cache releases
  // its lease in `done`. `done` must not call back into the store.
  virtual Result<PutOutcome> put_then(const Artifact& artifact, PutDone done) {
    auto outcome = put(artifact);
    if (done) {
      done(outcome);
    }
    return outcome;
  }

  // Returns true when an entry was removed, false when there was none.
  virtual Result<bool> remove(const Key& key) = 0;

  // Lists the entries held now, in no particular order.
  virtual Result<std::vector<EntryInfo>> list() = 0;

  virtual Result<StoreStats> stats() = 0;
};

}  // namespace kcache
