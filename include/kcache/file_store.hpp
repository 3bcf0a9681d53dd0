// kcache/file_store.hpp: the on-disk store, shared by every process of a user.
//
// Layout under `root` (format version 1, see docs/on-disk-format.md):
//
//   v1/entries/<k0k1>/<key>        payload: exactly the raw bytes
//   v1/entries/<k0k1>/<key>.pass   passport: the commit record, published last
//   v1/tmp/                        staging on the same filesystem
//   v1/locks/                      single-flight locks
//   v1/stats/                      shared counters and size accounting
//   v1/toolkit/                    toolkit probe memos (compile/toolkit.cpp)
//
// Guarantees: one atomic publish per entry; a reader never sees a partial or
// mixed entry; every read verifies the payload against its passport; a damaged
// entry is a miss, counted and removed; the size cap holds across processes;
// any write failure (ENOSPC, EACCES, EROFS, EIO) degrades the store: reads go
// on, writes are skipped with one warning and a counter.
//
// Thread-safety: every method is thread-safe, and any number of processes may
// use one root at once.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/store.hpp"

namespace kcache {

// How hard a put pushes its bytes to stable storage before publishing.
enum class FsyncPolicy {
  none,                // rely on the page cache; fastest, an OS crash may lose recent entries
  file,                // fsync payload and passport before their renames (default)
  file_and_directory,  // also fsync the shard directory after publishing
};

// Who may use the cache directory.
enum class Sharing {
  private_to_user,  // directories 0700, files 0600 (default)
  group,            // directories 2770 (setgid), files 0660: a team cache on one machine
};

// How a get checks the payload.
enum class ReadVerify {
  fast_when_unchanged,  // full SHA-256 on first read; later reads trust a recorded
                        // (size, mtime, ctime, inode) stamp plus an XXH3 of the bytes
  always_full,          // SHA-256 of the payload on every read
};

// Whether FileStore::open() sweeps leftover temporary files.
enum class OpenSweep { no, yes };

// How get() and get_into() read a payload of FileStore::k_map_min_bytes or more.
enum class LargeReads {
  // Mapped (MAP_PRIVATE) and checked where the page cache holds it; get()
  // returns the mapping as the payload. Fastest, but a mapping of a file shows
  // what another process later writes into that file in place, and faults
  // (SIGBUS) where the file was truncated: safe only while nothing but kcache
  // touches the cache directory (kcache never writes a published file in place).
  mapped,
  // Read with pread(2) into memory of the process (or memory get_into lends),
  // in bounded chunks, each hashed as it arrives; the bytes returned are the
  // bytes checked, owned by the process: nothing done to the file afterwards
  // changes them, and a file truncated under the read is a miss, never a
  // fault. One copy from the page cache. The Python package uses this
  // (docs/python.md, "Zero-copy reads").
  copied,
};

// Which entries a put at the cap evicts first (docs/on-disk-format.md, "Size
// cap and eviction"). Pinned entries (FileStore::pin) are never evicted.
enum class EvictionPolicy {
  // Cheapest to rebuild per byte first: of each eviction window, the entries
  // with the least uses x compile_duration_us / (payload bytes x time since
  // last use) go first (GreedyDual-Size-Frequency with aging, the age standing
  // in for the inflation value; uses are the refreshes of the last use, at
  // most one per touch_interval). Entries with no recorded cost count as free
  // to rebuild.
  cost,
  // Least recently used first (the passport's mtime).
  lru,
  // As cost without the uses: compile_duration_us / (payload bytes x time
  // since last use) (GreedyDual-Size with aging; kcache's `cost` before uses
  // were recorded).
  gds,
};

// The setting's word for `policy`: "cost", "lru" or "gds".
const char* eviction_policy_name(EvictionPolicy policy) noexcept;

// Whether FileStore::clear removes pinned entries too.
enum class ClearPinned { keep, remove };

struct FileStoreOptions {
  std::filesystem::path root;                      // the cache directory ($KCACHE_DIR)
  std::uint64_t max_size_bytes = std::uint64_t{5} << 30;  // 0 = no cap
  FsyncPolicy fsync = FsyncPolicy::file;
  Sharing sharing = Sharing::private_to_user;
  ReadVerify verify = ReadVerify::fast_when_unchanged;
  // Temporary files in v1/tmp are named after their writer (pid, start time,
  // boot and pid namespace). One whose writer is gone (killed mid-put) is a
  // leftover and is removed at once; one whose writer cannot be judged (it
  // runs on another machine or in another pid namespace, or the name is not
  // kcache's) only when it is older than this. A running writer's file is
  // never removed. Sweeps run on open (see sweep_on_open), each time the
  // eviction steps have visited every shard, in prune and clear, and in
  // verify with Repair::yes.
  std::chrono::seconds stale_temp_age{3600};
  // Whether open() sweeps v1/tmp. An observer that must change nothing
  // (`kcache stats`, `kcache verify` without --repair) says no.
  OpenSweep sweep_on_open = OpenSweep::yes;
  // A hit refreshes the entry's last-use stamp (the passport's mtime) only when
  // the stamp is older than this, so hits rarely write.
  std::chrono::seconds touch_interval{60};
  // A put at the cap evicts in steps: each removes the least recently used
  // entries of a window of shards (at least 512 entries) until it has freed
  // what the put needs and at least (100 - this) percent of the window's bytes,
  // so that the next puts find room (docs/on-disk-format.md, "Size cap").
  unsigned low_watermark_percent = 90;
  // Which entries the cap evicts first (setting eviction_policy /
  // KCACHE_EVICTION_POLICY). Every process should use the same; a mix is safe
  // (each eviction step ranks its window by its own process's policy).
  EvictionPolicy eviction_policy = EvictionPolicy::cost;
  // Called once per store with a one-line warning when the store degrades
  // (writes skipped). Default: print to stderr with a "kcache: warning:" prefix.
  std::function<void(const std::string&)> warn;
  // Called each time get() finds a damaged entry and removes it, with the key
  // and what was wrong (e.g. "the payload's SHA-256 does not match the
  // passport"), from the thread that called get(). Default: one
  // "kcache: warning: cache entry KEY was damaged (WHY) ..." line on stderr for
  // the first such entry of the process.
  std::function<void(const Key&, const std::string&)> damaged;
  // How large payloads are read (see LargeReads). get_view() always maps.
  LargeReads large_reads = LargeReads::mapped;
  // The size from which get() and get_into() treat a payload as large
  // (FileStore::k_map_min_bytes unless set; at least 4 KiB). In a warm process a read
  // into memory it has used before costs less than a mapping below 1 MiB; a
  // new process pays a page fault and a zero-fill for every page of a fresh
  // buffer, so the kcache command maps from 16 KiB (docs/performance.md,
  // "Process start"). Below 1 MiB a mapping is not populated up front: the
  // kernel maps 16 cached pages per fault as the check reads through it.
  std::size_t map_min_bytes = 1024 * 1024;
};

// What verify() found.
struct VerifyReport {
  std::uint64_t entries_checked = 0;
  std::uint64_t entries_ok = 0;
  std::uint64_t entries_bad = 0;      // payload or passport failed a check
  std::uint64_t entries_removed = 0;  // with `repair`
  std::uint64_t orphans = 0;          // payloads without passport, junk names, stale temps
  std::uint64_t orphans_removed = 0;  // with `repair`
  // Of the orphans: temporary files in v1/tmp whose writer is gone (or, for a
  // writer that cannot be judged, older than stale_temp_age), and how many of
  // them were removed (with `repair`).
  std::uint64_t stale_temps = 0;
  std::uint64_t stale_temps_removed = 0;
  // The shared size accounting against the disk: what the counters said
  // before verify, and the complete entries found. With `repair` the counters
  // are set to what is on disk (counters_resynced); reservations of puts in
  // flight are kept, those of writers that are gone are released
  // (reserved_bytes_released).
  std::uint64_t counted_entries = 0;
  std::uint64_t counted_bytes = 0;
  std::uint64_t disk_entries = 0;
  std::uint64_t disk_bytes = 0;
  bool counters_resynced = false;
  std::uint64_t reserved_bytes_released = 0;
  std::vector<std::string> problems;  // one line per finding
};

struct PruneReport {
  std::uint64_t entries_removed = 0;
  std::uint64_t bytes_removed = 0;
  std::uint64_t size_after = 0;
};

enum class Repair { no, yes };

// A verified entry whose payload stays in its file (FileStore::open_payload):
// the passport, and the payload file held open. Memory does not grow with the
// payload's size. Move-only; closes the file when destroyed.
// Thread-safety: const methods may be called from many threads.
class PayloadFile {
 public:
  PayloadFile() = default;
  PayloadFile(PayloadFile&& other) noexcept;
  PayloadFile& operator=(PayloadFile&& other) noexcept;
  PayloadFile(const PayloadFile&) = delete;
  PayloadFile& operator=(const PayloadFile&) = delete;
  ~PayloadFile();

  const Passport& passport() const noexcept { return m_passport; }
  std::uint64_t size() const noexcept { return m_passport.payload_size; }

  // Copies the whole payload to `out_fd` (a file, pipe, socket or device) in
  // bounded chunks (sendfile where the kernel can), then checks that the
  // payload file is still the one that was verified (inode, size, mtime,
  // ctime: any write to it changes them). Returns an io error naming
  // `out_name` when writing fails, `not_found` when the entry was removed
  // while it was copied (unlinked: another process's clear, prune or
  // eviction; a miss), and `corrupt` when the file changed while it was
  // copied; in both cases the bytes written are not to be used.
  Result<void> copy_to(int out_fd, std::string_view out_name) const;

  // Reads `n` bytes of the payload at `offset` into `out` (pread: the file
  // position is not used, so threads may read at once). Failure:
  // invalid_argument past the payload's end, io on a read error, `corrupt`
  // when the file is shorter than verified.
  Result<void> read_at(std::uint64_t offset, char* out, std::size_t n) const;

 private:
  friend class FileStore;
  Passport m_passport;
  int m_fd = -1;
  std::uint64_t m_ino = 0;
  std::int64_t m_mtime_ns = 0;
  std::int64_t m_ctime_ns = 0;
};

// A verified payload borrowed without a copy into a std::string
// (FileStore::get_view): a read-only mapping of the payload file for large
// payloads, else bytes read into an uninitialised buffer. Move-only; the bytes
// stay valid until the view is destroyed, whatever happens to the entry.
// Thread-safety: const methods may be called from many threads.
class PayloadView {
 public:
  PayloadView() = default;
  PayloadView(PayloadView&& other) noexcept;
  PayloadView& operator=(PayloadView&& other) noexcept;
  PayloadView(const PayloadView&) = delete;
  PayloadView& operator=(const PayloadView&) = delete;
  ~PayloadView();

  const Passport& passport() const noexcept { return m_passport; }
  std::string_view bytes() const noexcept { return {m_data, m_size}; }
  bool mapped() const noexcept { return m_mapped; }

 private:
  friend class FileStore;
  void reset() noexcept;
  Passport m_passport;
  const char* m_data = nullptr;
  std::size_t m_size = 0;
  bool m_mapped = false;
  std::unique_ptr<char[]> m_owned;
};

// What put_stream() stored.
struct StreamedPut {
  PutOutcome outcome = PutOutcome::stored;
  Passport passport;
};

// Makes the passport of a payload streamed by put_stream(), from its size and
// SHA-256 (32 raw bytes); an error refuses the put.
using PassportForPayload =
    std::function<Result<Passport>(std::uint64_t size, const std::array<std::uint8_t, 32>& sha256)>;

// How a staged payload is published (FileStore::stage_payload).
enum class StagedAs {
  put,   // as put(): fsync as the options say
  fill,  // as fill(): no fsync (a copy of an entry another tier holds, checked on every read)
};

// A payload written in parts into v1/tmp, hashed as it goes, and published
// as an entry by commit() (FileStore::stage_payload). Nothing of it is
// visible before commit(): a staged payload that is dropped, or whose commit
// fails, is removed (and its room under the cap released). Memory does not
// grow with the payload's size. Move-only.
// REQUIRES: the FileStore that made it outlives it.
// Thread-safety: one thread at a time.
class StagedPayload {
 public:
  StagedPayload();
  StagedPayload(StagedPayload&& other) noexcept;
  StagedPayload& operator=(StagedPayload&& other) noexcept;
  StagedPayload(const StagedPayload&) = delete;
  StagedPayload& operator=(const StagedPayload&) = delete;
  ~StagedPayload();

  // Appends `bytes`. Failure: the store's write error (ENOSPC, EIO ... as
  // put() reports them; the staged file is removed and every later call fails).
  Result<void> write(std::string_view bytes);
  // Bytes written so far, and their SHA-256 once finished.
  std::uint64_t size() const noexcept;
  // Publishes the bytes written as the payload of `passport`, as put()
  // publishes (the passport last, under the shard lock). `stored`, or
  // `already_present` (the staged bytes are then dropped). Failure:
  // invalid_argument when the passport does not name the size and SHA-256 of
  // the bytes written (nothing is published), else as put(). Once only.
  Result<PutOutcome> commit(const Passport& passport);
  // SHA-256 (32 raw bytes) of the bytes written; ends writing.
  const std::array<std::uint8_t, 32>& finish_digest();
  // After a successful commit(): the bytes committed, from the staged file
  // itself (the inode published, or dropped when the entry was already
  // present) and not read through the entry or hashed again: their SHA-256
  // was computed as they were written and matched the passport at commit,
  // and a file once published is never written in place (a later put of the
  // key publishes another inode). Mapped, or read with LargeReads::copied, as
  // get() reads a payload. Failure: io (no successful commit, or a read error).
  Result<Payload> committed_payload();

 private:
  friend class FileStore;
  struct State;
  std::unique_ptr<State> m_state;
};

class FileStore final : public Store {
 public:
  // Opens (creating if needed) the store at `options.root`. Fails with
  // permission_denied when the root is owned by another user or is a symlink,
  // with io when it cannot be created, and with corrupt when a directory of
  // the layout (v1, v1/entries, tmp, locks, stats, toolkit) is something else
  // (the message names it and says to run `kcache verify --repair`, which
  // calls repair_layout). A store that can be read but not written opens in
  // degraded (read-only) mode instead of failing.
  static Result<std::unique_ptr<FileStore>> open(FileStoreOptions options);

  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::string_view name() const noexcept override { return "file"; }
  std::optional<Tier> tier_kind() const noexcept override { return Tier::disk; }
  // The request counters of this cache directory (v1/stats/requests), opened
  // on first use; process-local counts where the file cannot be made (a
  // read-only cache). Never null.
  RequestStats* request_stats() noexcept override;
  Result<std::optional<Artifact>> get(const Key& key) override;
  // get(); a payload of k_map_min_bytes or more is mapped (LargeReads::copied:
  // read with pread), copied into the memory `allocate` lends, and checked
  // there (one copy, no zero-fill, the bytes returned are the bytes checked). Smaller payloads are read as get()
  // reads them: there a caller's copy costs less than asking for memory.
  Result<std::optional<Artifact>> get_into(const Key& key, const PayloadAllocator& allocate) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  // put() of an artifact another store has just returned checked (TieredStore
  // filling this tier from a remote hit), published without fsync whatever
  // the fsync option says: the entry is not this store's to keep (the tier
  // below holds it), a crash can at worst leave it torn, and every read
  // checks it (a torn entry is a miss, removed and counted; the next get
  // fetches it again). Refuses (invalid_argument) a malformed passport or a
  // size mismatch; the payload is not hashed again.
  Result<PutOutcome> fill(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

  // get(), leaving the payload in its file: the payload is checked against its
  // passport in bounded chunks, so memory does not grow with its size (a
  // multi-GiB entry costs a few MiB). Hit: the passport and the open payload
  // file. Miss: std::nullopt (a damaged entry is a miss, counted and removed,
  // as for get()). Error: the store cannot be read.
  Result<std::optional<PayloadFile>> open_payload(const Key& key);

  // get() without copying the payload into a std::string: payloads of
  // k_map_min_bytes or more are mapped read-only and checked through the
  // mapping, smaller ones are read into a buffer the view owns, unzeroed.
  // Same hits, misses, errors and counters as get().
  // (Below 1 MiB, setting up and tearing down a mapping costs more than a read.)
  static constexpr std::size_t k_map_min_bytes = 1024 * 1024;  // FileStoreOptions::map_min_bytes' default
  // get_into() reads a payload of this many bytes or more straight into the
  // memory `allocate` lends (smaller ones are copied there after the read).
  static constexpr std::size_t k_lend_min_bytes = 64 * 1024;
  Result<std::optional<PayloadView>> get_view(const Key& key);

  // put() of a payload read from `fd` to its end in bounded chunks: the bytes
  // are staged in v1/tmp while their SHA-256 is computed, `make_passport` is
  // called with their size and digest, and the entry is published as put()
  // publishes. Memory does not grow with the payload's size. Fails with
  // invalid_argument when the passport does not name that size and digest,
  // with io when `fd` cannot be read, and as put() when the store cannot be
  // written. `fd` may be a pipe.
  Result<StreamedPut> put_stream(int fd, const PassportForPayload& make_passport);

  // Starts a payload written in parts (see StagedPayload), e.g. an entry
  // downloaded from a remote and checked as it arrives. `expected_bytes`
  // (payload + passport; 0: not known) is reserved under the cap first, as
  // put() reserves. Failure: read_only while the store is degraded, else the
  // write error of creating the staging file.
  Result<StagedPayload> stage_payload(std::uint64_t expected_bytes, StagedAs as);

  // Re-hashes every entry in full, lists orphans (and temporary files of
  // writers that are gone) and compares the shared size accounting with the
  // disk; with Repair::yes removes what is bad, sweeps orphans and sets the
  // accounting to what is on disk. Without repair nothing is changed.
  Result<VerifyReport> verify(Repair repair);

  // Repairs the directory layout under `options.root` before open(): each of
  // v1, v1/entries, v1/tmp, v1/locks, v1/stats and v1/toolkit that exists but
  // is not a directory (a regular file, a symlink, a FIFO ...) is renamed
  // aside to "<name>.broken-<unix seconds>" in the same directory (never
  // followed, never deleted: kcache does not read or remove it afterwards) and
  // the directory is created anew. Nothing outside the cache directory is
  // touched, and a root that open() would refuse (a symlink, another user's)
  // is left alone. Returns one line per repair (empty: the layout was sound);
  // fails with the errno-based error of a rename or mkdir that failed.
  static Result<std::vector<std::string>> repair_layout(const FileStoreOptions& options);

  // Evicts entries (in the order of options.eviction_policy; pinned entries
  // never) until the store holds at most `max_size_bytes` (the configured cap
  // when 0); when pinned entries alone hold more, every other entry goes and
  // prune fails with no_space, naming the pinned bytes. Fails (with the errno-based
  // reason, e.g. permission_denied or read_only) when entries that had to go
  // could not be removed: a prune that did not reach its size is no success.
  Result<PruneReport> prune(std::uint64_t max_size_bytes = 0);

  // Removes every entry and resets size accounting (counters are kept);
  // pinned entries stay unless `pinned` is ClearPinned::remove (their pins
  // go with them). Returns how many entries were removed; fails, naming the
  // cache and the first reason, when any entry could not be removed.
  Result<std::uint64_t> clear(ClearPinned pinned = ClearPinned::keep);

  // Pins the entry of `key`: the size cap never evicts it (prune neither); an
  // explicit remove(), clear(ClearPinned::remove), or the removal of a damaged
  // entry still remove it, with its pin. The pin is a marker file beside the
  // entry (docs/on-disk-format.md), seen by every process. Returns true when
  // the entry was pinned by this call, false when it was pinned already;
  // not_found when the store holds no entry for `key`; the errno-based error
  // (read_only, permission_denied ...) when the marker cannot be written.
  // Pinning adds no bytes; while pinned entries alone fill the cap, puts are
  // refused (see put()) and stats() says so (pins_over_cap).
  Result<bool> pin(const Key& key);
  // Unpins the entry of `key`: it is evicted like any other again. Returns
  // true when a pin was removed, false when the entry was not pinned (or does
  // not exist); an errno-based error when the marker cannot be removed.
  Result<bool> unpin(const Key& key);
  // True when the entry of `key` is pinned now.
  bool pinned(const Key& key) const;

  // True once a write failure has made the store skip writes.
  bool degraded() const noexcept;

  const FileStoreOptions& options() const noexcept;

 private:
  friend class StagedPayload;
  struct Impl;
  explicit FileStore(std::unique_ptr<Impl> impl);
  // The read path shared by get(), get_into(), get_view() and open_payload():
  // with `file` null the payload is read into the returned artifact (into
  // memory from `allocate` when given); otherwise it is checked in chunks and
  // left open in `*file` (the artifact's payload stays empty).
  Result<std::optional<Artifact>> read_entry(const Key& key, PayloadFile* file, PayloadView* view = nullptr,
                                             const PayloadAllocator* allocate = nullptr);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
