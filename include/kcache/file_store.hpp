// kcache/file_store.hpp: the on-disk store, shared by every process of a user.
//
// Layout under `root` (format version 1, see docs/on-disk-format.md):
//
//   v1/entries/<k0k1>/<key>        payload: exactly the raw bytes
//   v1/entries/<k0k1>/<key>.pass   passport: the commit record, published last
//   v1/tmp/                        staging on the same filesystem
//   v1/locks/                      single-flight locks
//   v1/stats/                      shared counters and size accounting
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

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

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

struct FileStoreOptions {
  std::filesystem::path root;                      // the cache directory ($KCACHE_DIR)
  std::uint64_t max_size_bytes = std::uint64_t{5} << 30;  // 0 = no cap
  FsyncPolicy fsync = FsyncPolicy::file;
  Sharing sharing = Sharing::private_to_user;
  ReadVerify verify = ReadVerify::fast_when_unchanged;
  // Temporary files in v1/tmp older than this are leftovers of killed writers
  // and are removed (on open, by eviction rounds, and by verify with Repair::yes).
  std::chrono::seconds stale_temp_age{3600};
  // A hit refreshes the entry's last-use stamp (the passport's mtime) only when
  // the stamp is older than this, so hits rarely write.
  std::chrono::seconds touch_interval{60};
  // When the cap is exceeded, eviction removes least recently used entries
  // until the store holds at most this percentage of the cap (low watermark).
  unsigned low_watermark_percent = 90;
  // Called once per store with a one-line warning when the store degrades
  // (writes skipped). Default: print to stderr with a "kcache: warning:" prefix.
  std::function<void(const std::string&)> warn;
  // Called each time get() finds a damaged entry and removes it, with the key
  // and what was wrong (e.g. "the payload's SHA-256 does not match the
  // passport"), from the thread that called get(). Default: one
  // "kcache: warning: cache entry KEY was damaged (WHY) ..." line on stderr for
  // the first such entry of the process.
  std::function<void(const Key&, const std::string&)> damaged;
};

// What verify() found.
struct VerifyReport {
  std::uint64_t entries_checked = 0;
  std::uint64_t entries_ok = 0;
  std::uint64_t entries_bad = 0;      // payload or passport failed a check
  std::uint64_t entries_removed = 0;  // with `repair`
  std::uint64_t orphans = 0;          // payloads without passport, junk names, stale temps
  std::uint64_t orphans_removed = 0;  // with `repair`
  std::vector<std::string> problems;  // one line per finding
};

struct PruneReport {
  std::uint64_t entries_removed = 0;
  std::uint64_t bytes_removed = 0;
  std::uint64_t size_after = 0;
};

enum class Repair { no, yes };

class FileStore final : public Store {
 public:
  // Opens (creating if needed) the store at `options.root`. Fails with
  // permission_denied when the root is owned by another user or is a symlink,
  // and with io when it cannot be created. A store that can be read but not
  // written opens in degraded (read-only) mode instead of failing.
  static Result<std::unique_ptr<FileStore>> open(FileStoreOptions options);

  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::string_view name() const noexcept override { return "file"; }
  Result<std::optional<Artifact>> get(const Key& key) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

  // Re-hashes every entry in full and lists orphans; with Repair::yes removes
  // what is bad and sweeps orphans.
  Result<VerifyReport> verify(Repair repair);

  // Evicts least recently used entries until the store holds at most
  // `max_size_bytes` (the configured cap when 0).
  Result<PruneReport> prune(std::uint64_t max_size_bytes = 0);

  // Removes every entry and resets size accounting (counters are kept).
  Result<std::uint64_t> clear();

  // True once a write failure has made the store skip writes.
  bool degraded() const noexcept;

  const FileStoreOptions& options() const noexcept;

 private:
  struct Impl;
  explicit FileStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
