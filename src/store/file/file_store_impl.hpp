// store/file/file_store_impl.hpp: the private state of FileStore, shared by
// file_store.cpp (open, remove, list, stats), file_store_read.cpp (get and the
// passport memo), file_store_write.cpp (put: staging, publishing),
// file_store_support.cpp (helpers the others share), file_payload.cpp
// (payload checks), file_store_verify.cpp (verify) and
// file_store_maintenance.cpp (eviction, prune, clear, sweeping).
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>
#include <string>
#include <string_view>

#include "kcache/file_store.hpp"
#include "kcache/request_stats.hpp"
#include "store/file/file_check_table.hpp"
#include "store/file/file_layout.hpp"
#include "store/file/shared_counters.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"
#include "util/process_identity.hpp"

namespace kcache {

// Whether a missing shard directory is created.
enum class CreateShard { no, yes };

// Whether a shard scan removes payloads that have no passport.
enum class Orphans { keep, remove };

// Whether a shard scan sets the shard's accounting to what it found.
enum class Recount { no, yes };

// What is in v1/tmp (FileStore::Impl::scan_temps).
struct TempScan {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::uint64_t stale_files = 0;
  std::uint64_t stale_bytes = 0;
  std::uint64_t removed = 0;  // with TempSweep::remove
};

// Whether scan_temps removes the stale temporary files it finds: `remove`
// judges every writer in full; `remove_quick` (the sweep on open) checks only
// that the pid of a temp younger than stale_temp_age exists, so that an open
// costs one kill(2) per temp (a reused pid's leftover waits for a full sweep).
enum class TempSweep { count, remove, remove_quick };

// What a shard scan found for one complete entry.
struct ScannedEntry {
  unsigned shard = 0;
  std::string key_hex;
  std::int64_t last_used_ns = 0;  // passport mtime
  std::uint64_t pass_ino = 0;
  std::uint64_t bytes = 0;  // payload + passport
  std::uint64_t cost_us = 0;  // rebuild cost recorded in the payload's mtime (store/file/entry_cost.hpp); 0: unknown
  std::uint64_t uses = 1;     // uses recorded in the passport's mtime (store/file/entry_cost.hpp)
  bool pinned = false;        // a pin marker is beside it (never evicted)
};

struct FileStore::Impl {
  FileStoreOptions options;
  // options.map_min_bytes, at least one page (an empty payload is never mapped).
  std::size_t map_min_bytes() const noexcept { return std::max<std::size_t>(options.map_min_bytes, 4096); }
  util::Fd root_fd;
  util::Fd entries_fd;
  int entries_err = EBADF;  // why entries_fd could not be opened
  util::Fd tmp_fd;
  util::Fd stats_fd;
  // stats/evict.lock, opened (created) by the first put that needs it: a
  // process that only reads never opens it. -1 until then, or when it cannot
  // be opened. Use evict_lock().
  std::atomic<int> evict_lock_held_fd{-1};
  std::mutex evict_lock_open_mutex;
  // The descriptor of stats/evict.lock, opening it on first use; -1 when it cannot be opened.
  int evict_lock();
  std::unique_ptr<store::SharedCounters> counters;
  // stats/requests (kcache/request_stats.hpp), opened by the first request
  // counted through this store: a store that only stores opens none.
  std::once_flag requests_once;
  std::unique_ptr<RequestStats> requests;
  std::unique_ptr<store::FileCheckTable> checks;

  // Passports parsed by this process, bound to the identity of the passport
  // file they came from. A published passport is never rewritten in place
  // (entries change only by rename or unlink), and any write or metadata
  // change moves its ctime, so the same (dev, ino, size, mtime, ctime) means
  // the same bytes and the parse can be skipped. Bounded; cleared when full.
  struct PassportMemo {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;
    std::shared_ptr<const Passport> passport;
  };
  static constexpr std::size_t k_memo_max_entries = 4096;
  static constexpr off_t k_memo_max_passport_bytes = 64 * 1024;
  std::mutex memo_mutex;
  std::unordered_map<Key, PassportMemo, KeyHash> memo;
  // Returns the memoised passport of `key` when `st` is the file it was parsed from.
  std::shared_ptr<const Passport> memo_find(const Key& key, const struct stat& st);
  void memo_store(const Key& key, const struct stat& st, std::shared_ptr<const Passport> passport);
  void memo_forget(const Key& key);

  // Shard directories opened by get(), kept for the life of the store so a
  // hit does not pay for opening and closing its shard. kcache never removes a
  // shard directory; one removed behind its back (nlink 0) is dropped from
  // here and reopened. Dropped descriptors are closed with the store, since
  // another thread may still be using them.
  std::array<std::atomic<int>, 256> shard_fds{};
  std::mutex dropped_mutex;
  std::vector<util::Fd> dropped_shard_fds;
  // Returns the held descriptor of `shard`, opening it if needed; -1 and `err` when it cannot be opened.
  int held_shard(unsigned shard, int& err);
  // Drops `fd` from the held descriptors when its directory has been removed. Returns true if dropped.
  bool drop_held_shard_if_removed(unsigned shard, int fd);
  Impl();
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Serialises eviction between the threads of this process (flock on the
  // shared evict lock descriptor does not).
  std::mutex evict_mutex;

  std::atomic<bool> degraded{false};
  std::atomic<std::int64_t> retry_writes_at_ms{0};
  std::atomic<bool> warned{false};

  // --- file_store.cpp, file_store_read.cpp, file_store_write.cpp, file_store_support.cpp ---
  // Bytes of the shared metadata files (counters, check table): counted in
  // stats and under the cap.
  std::uint64_t metadata_bytes() const noexcept;
  // What entries may hold under `cap` once the metadata is paid for (0: no cap).
  std::uint64_t entry_budget(std::uint64_t cap) const noexcept;
  // Opens the shard directory without following a symlink. On failure returns
  // an invalid Fd and sets `err`.
  util::Fd open_shard(unsigned shard, CreateShard create, int& err) const;
  std::string new_temp_name();
  // Counts a write failure and, for ENOSPC/EDQUOT/EACCES/EPERM/EROFS/EIO,
  // degrades the store (one warning per store). Returns the error to hand back.
  Error write_failed(int err, std::string_view what);
  void warn(const std::string& line);
  // Fails with read_only (and counts a skipped put) while the store is degraded.
  Result<void> check_writable();
  // The error for a shard directory that cannot be opened or created.
  Error shard_open_failed(unsigned shard, int err);
  // Creates `name` in v1/tmp, lets `write(fd)` fill it (returns 0 or an
  // errno), sets its mode and fsyncs it as `fsync` says. On failure the
  // file is removed and the errno returned.
  int stage(const std::string& name, const std::function<int(int fd)>& write, FsyncPolicy fsync);
  // Publishes the payload staged as `tmp_payload` under `passport` (which is
  // staged here): under the shard lock, payload then passport by rename, then
  // the accounting, then eviction if above the cap. The staged files are
  // removed on every failure and when the key is already present. `fsync`:
  // the options' policy for a put, none for a fill.
  Result<PutOutcome> publish_staged(unsigned shard, int shard_fd, const Passport& passport, const std::string& json,
                                    const std::string& tmp_payload, FsyncPolicy fsync);
  // put() and fill() of an artifact already checked as each requires.
  Result<PutOutcome> put_checked(const Artifact& artifact, FsyncPolicy fsync);

  // Releases a room slot (make_room) when it goes out of scope.
  class RoomGuard {
   public:
    RoomGuard(store::SharedCounters& counters, int slot) noexcept : m_counters(counters), m_slot(slot) {}
    ~RoomGuard() { m_counters.release_room(m_slot); }
    RoomGuard(const RoomGuard&) = delete;
    RoomGuard& operator=(const RoomGuard&) = delete;

   private:
    store::SharedCounters& m_counters;
    int m_slot;
  };
  // Tells options.damaged (default: one stderr line per process) that get()
  // removed the damaged entry `key` because of `why`.
  void report_damaged(const Key& key, std::string_view why);
  // Under the shard lock: removes the entry of `key_hex` when its passport is
  // still the file described by `pass_seen` (null: whatever passport is there;
  // a payload without passport is an orphan and goes too). Adjusts the shard
  // accounting. Returns true when a passport was removed.
  bool remove_guarded(unsigned shard, int shard_fd, const std::string& key_hex, const struct stat* pass_seen);
  // The same, for a caller that already holds the shard lock.
  bool remove_locked(unsigned shard, int shard_fd, const std::string& key_hex, const struct stat* pass_seen);

  // --- file_payload.cpp ---
  enum class PayloadVerdict { ok, bad, error };
  struct PayloadCheck {
    PayloadVerdict verdict = PayloadVerdict::ok;
    int err = 0;  // the errno when verdict is error
  };
  // Reads the payload file `fd` (`st` its fstat, its size already checked
  // against `passport`) in bounded chunks, into `out` when not null (else only
  // hashing it), and checks it against `passport`: XXH3 against a check record
  // made by a full check of this very file when the options allow, else
  // SHA-256 (then recorded). A payload of map_min_bytes() or more
  // is mapped into `out` instead of read (checked where it lies), or, with
  // `allocate`, copied from the mapping into memory it lends and checked
  // there. bad: the bytes do not match, or the file ended early; error: a
  // read failed (err).
  PayloadCheck check_payload(const Key& key, int fd, const struct stat& st, const Passport& passport,
                             Payload* out, const PayloadAllocator* allocate = nullptr);
  // check_payload() for get_view(): maps the payload (or reads a small one
  // into a buffer) into `view` and checks the bytes there.
  PayloadCheck check_payload_view(const Key& key, int fd, const struct stat& st, const Passport& passport,
                                  PayloadView& view);
  // The `size` bytes of the payload file `fd` whose SHA-256 was already
  // checked against its passport as they were written (a committed
  // StagedPayload), read as check_payload reads them (mapped at
  // map_min_bytes() or more, or read with LargeReads::copied) but
  // not hashed again. Failure: the errno of the read or mapping (EPIPE: the
  // file is shorter).
  tl::expected<Payload, int> load_checked_payload(int fd, std::uint64_t size) const;
  // The verdict on bytes already hashed: XXH3 against the record when `fast`,
  // else the SHA-256 `sha_hex` (then recorded). `rehash` computes SHA-256 when
  // the fast check fails.
  PayloadCheck judge_payload(const Key& key, const struct stat& st, const Passport& passport, bool fast,
                             bool fast_allowed, const store::CheckRecord& rec, std::uint64_t xxh_value,
                             const std::string& sha_hex, const std::function<int(std::string&)>& rehash);

  // --- file_store_maintenance.cpp ---
  // Evicts when the shared size is above the cap (see docs/on-disk-format.md).
  void maybe_evict();
  // Reserves room for a put in flight of `bytes` (payload + passport) before
  // it is staged, so that staged entries count against the cap: evicts ahead
  // when published + reserved + `bytes` would pass the cap, and waits while
  // other writers' entries in flight fill it. Returns the room slot to release
  // once the entry is published or abandoned, or -1 (nothing reserved) when
  // there is no cap, the counters are process-local, or the entry alone is
  // larger than the cap.
  int make_room(std::uint64_t bytes);
  // Evicts least recently used entries until at most `target` bytes are held,
  // scanning every shard (prune). REQUIRES: the evict lock is held. Returns
  // (entries, bytes) removed.
  std::pair<std::uint64_t, std::uint64_t> evict_to(std::uint64_t target);
  // One eviction step of a put at the cap, with work bounded by a window, not
  // by the cache: scans the shards from the eviction hand on until the window
  // holds k_evict_sample entries (at least one shard) and its cut covers
  // `goal`, then removes the window's least recently used entries until it
  // has freed `goal` bytes and at least its cut (100 - low_watermark_percent
  // of the window's bytes). Moves the hand past the window and sweeps stale
  // temp files when the hand wraps. REQUIRES: the evict lock is held.
  // Returns (entries, bytes) removed.
  std::pair<std::uint64_t, std::uint64_t> evict_step(std::uint64_t goal);
  // Removes the entries of `window` (ranked here by options.eviction_policy:
  // least recently used first, or cheapest to rebuild per byte and unit of
  // age first) until `want` bytes are freed; an entry replaced or used since
  // its scan, or pinned since, is skipped. Returns (entries, bytes) removed.
  std::pair<std::uint64_t, std::uint64_t> evict_oldest(std::vector<ScannedEntry>& window, std::uint64_t want);
  // Scans shard `shard` under its lock into `window`, leaving pinned entries
  // out (they are never candidates). Returns the bytes added.
  std::uint64_t scan_into(unsigned shard, std::vector<ScannedEntry>& window);
  // --- file_store_pins.cpp ---
  // The shard directory of `key`: an invalid Fd when it does not exist (no
  // entry there), an errno-based error when it cannot be opened.
  Result<util::Fd> existing_shard(const Key& key) const;
  // When pinned entries plus an entry of `bytes` would not fit what the cap
  // leaves for entries: counts a skipped put, warns once per store, and
  // returns the no_space error that names the pinned bytes and what to do.
  Result<void> check_pins_leave_room(std::uint64_t bytes, const Key* key);
  std::atomic<bool> warned_pins{false};
  // Under the shard lock: lists the shard's complete entries, removes orphan
  // payloads (with Orphans::remove), and (with Recount::yes) sets the shard
  // accounting to what is there.
  std::vector<ScannedEntry> scan_shard_locked(unsigned shard, int shard_fd, Orphans orphans = Orphans::remove,
                                              Recount recount = Recount::yes);
  // Recounts every shard (used when the counters file is new), and the pinned entries.
  void recount_all();
  // True when the temporary file `name` (stat `st`) is a leftover: its writer
  // is gone, or, for a writer that cannot be judged, it is older than
  // options.stale_temp_age. A running writer's file is never stale.
  bool temp_is_stale(std::string_view name, const struct stat& st, std::int64_t now_ns,
                     util::PidCheck check = util::PidCheck::full) const;
  // Counts the files in v1/tmp and the stale ones among them; with
  // TempSweep::remove removes the stale ones. `stale_names`, when not null,
  // receives one line per stale file.
  TempScan scan_temps(TempSweep sweep, std::vector<std::string>* stale_names = nullptr);
  // scan_temps(`sweep`): returns how many were removed.
  std::uint64_t sweep_temps(TempSweep sweep = TempSweep::remove) { return scan_temps(sweep).removed; }
};

// SHA-256 (lowercase hex, into `hex`) of the first `size` bytes of `fd`, read
// through one bounded buffer. Returns 0, EPIPE when the file is shorter, or an errno.
int sha256_hex_of_file(int fd, std::uint64_t size, std::string& hex);

using util::io::for_each_dir_entry;  // (util/posix_io.hpp)

// "a regular file", "a symbolic link", "a FIFO" ... for the type bits of `mode`.
const char* describe_file_type(mode_t mode) noexcept;

// When the layout directory `name` under `parent_fd` exists but is not a
// directory (opening it failed with `err`): the corrupt error that names it
// and says to run `kcache verify --repair`. Otherwise nullopt.
std::optional<Error> layout_damaged(int parent_fd, const std::filesystem::path& root, const char* name, int err);

// True when `a` and `b` are one unchanged file (device, inode, size, ctime).
bool same_file(const struct stat& a, const struct stat& b) noexcept;

// What the caller knows of the parent directory of open_subdir's `name`.
enum class ParentDir {
  existing,  // anything: `name` is opened first (it exists in every process but the first)
  made_now,  // this process made it a moment ago: `name` is most likely missing, so it is
             // created first (one system call less); one made meanwhile by another process is opened
  made_now_mode_exact,  // as made_now, and mkdir gave that parent exactly `mode` in the same
                        // call (the umask takes none of its bits): `name` made here gets `mode`
                        // too, so it is not fchmod-ed
};

// Creates the directory `name` under `parent_fd` (mode fixed regardless of
// umask when created here) and opens it without following a symlink. On
// failure returns an invalid Fd and sets `err`. `created_it`, when given, is
// set to whether this call made the directory.
util::Fd open_subdir(int parent_fd, const char* name, mode_t mode, int& err, bool* created_it = nullptr,
                     ParentDir parent = ParentDir::existing);

std::int64_t now_unix_ms() noexcept;
// Nanoseconds: compare with file times (a millisecond "now" can be earlier
// than the mtime of a file written in the same millisecond).
std::int64_t now_unix_ns() noexcept;
std::int64_t mtime_ns(const struct stat& st) noexcept;

// RAII flock on a shard (or any) directory fd.
class ShardLock {
 public:
  ShardLock(int fd, int operation) noexcept;
  ~ShardLock();
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;
  bool held() const noexcept { return m_held; }
  int error() const noexcept { return m_err; }

 private:
  int m_fd;
  bool m_held = false;
  int m_err = 0;
};

}  // namespace kcache
