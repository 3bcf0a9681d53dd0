// store/file/file_store_support.cpp: what the parts of FileStore share: opening
// layout directories and shards, temp names, warnings, write failures and
// degrading, guarded removal, directory listing, the shard lock.
#include "kcache/file_store.hpp"

#include <dirent.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "store/file/file_store_impl.hpp"
#include "util/posix_io.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

namespace {

constexpr std::int64_t k_degraded_retry_ms = 30'000;

bool is_degrading_errno(int err) noexcept {
  return err == ENOSPC || err == EDQUOT || err == EACCES || err == EPERM || err == EROFS || err == EIO;
}

}  // namespace

bool same_file(const struct stat& a, const struct stat& b) noexcept {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

util::Fd open_subdir(int parent_fd, const char* name, mode_t mode, int& err, bool* created_it, ParentDir parent) {
  if (parent_fd < 0) {
    err = EBADF;
    return {};
  }
  // Open first: the directory exists in every process but the first, and a
  // failed mkdirat per directory is a system call on every cache hit. Under
  // a parent made just now, create first: the open would fail.
  util::Fd fd;
  if (parent == ParentDir::existing) {
    fd.reset(io::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  } else {
    errno = ENOENT;
  }
  bool created = false;
  if (!fd && errno == ENOENT) {
    int mkdir_err = 0;
    if (io::mkdirat(parent_fd, name, mode) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      mkdir_err = errno;  // it may still exist while we may not create (EROFS, EACCES)
    }
    fd.reset(io::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
    if (!fd && errno == ENOENT && mkdir_err != 0) {
      err = mkdir_err;
      return {};
    }
  }
  if (!fd) {
    err = errno;
    return {};
  }
  if (created && parent != ParentDir::made_now_mode_exact && io::fchmod(fd.get(), mode) != 0) {
    err = errno;  // never leave a directory with umask-dependent modes in use
    return {};
  }
  err = 0;
  if (created_it != nullptr) {
    *created_it = created;
  }
  return fd;
}

const char* describe_file_type(mode_t mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR:
    case S_IFBLK: return "a device file";
    default: return "not a directory";
  }
}

std::optional<Error> layout_damaged(int parent_fd, const std::filesystem::path& root, const char* name, int err) {
  if (parent_fd < 0 || (err != ENOTDIR && err != ELOOP && err != EEXIST)) {
    return std::nullopt;  // missing and not creatable, or unreadable: a degraded store, not a damaged one
  }
  struct stat st {};
  if (io::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) {
    return std::nullopt;
  }
  const std::string rel = std::string(std::string_view(name) == store::k_version_dir ? "" : "v1/") + name;
  return Error{ErrorCode::corrupt,
               "the cache at " + root.string() + " is damaged: " + (root / rel).string() + " is " +
                   describe_file_type(st.st_mode) + ", where kcache keeps a directory; run `kcache verify --repair` "
                   "to move it aside (to " + rel + std::string(store::k_broken_suffix) +
                   "<time>) and create the directory anew",
               {}};
}

std::int64_t now_unix_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t now_unix_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t mtime_ns(const struct stat& st) noexcept {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

ShardLock::ShardLock(int fd, int operation) noexcept : m_fd(fd) {
  m_err = io::lock(fd, operation);
  m_held = m_err == 0;
}

ShardLock::~ShardLock() {
  if (m_held) {
    ::flock(m_fd, LOCK_UN);
  }
}

// ---------------------------------------------------------------- Impl helpers

util::Fd FileStore::Impl::open_shard(unsigned shard, CreateShard create, int& err) const {
  if (!entries_fd) {
    err = entries_err;  // say why v1/entries could not be opened, not EBADF
    return {};
  }
  const std::string name = store::shard_name(shard);
  if (create == CreateShard::yes) {
    return open_subdir(entries_fd.get(), name.c_str(), store::dir_mode(options.sharing), err);
  }
  util::Fd fd(io::openat(entries_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  err = fd ? 0 : errno;
  return fd;
}

std::string FileStore::Impl::new_temp_name() {
  // Process-wide, so that two stores of one process never pick the same name;
  // the writer's identity sets processes (and reused pids) apart.
  static std::atomic<std::uint64_t> seq{0};
  return store::temp_name(util::current_process_identity(), seq.fetch_add(1, std::memory_order_relaxed));
}

void FileStore::Impl::report_damaged(const Key& key, std::string_view why) {
  if (options.damaged) {
    options.damaged(key, std::string(why));
    return;
  }
  // One line per process: a cache with many damaged entries does not flood a build log.
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) {
    std::fprintf(stderr, "kcache: warning: cache entry %s was damaged (%.*s) and has been removed; it is treated as a miss\n",
                 key.hex().c_str(), static_cast<int>(why.size()), why.data());
  }
}

void FileStore::Impl::warn(const std::string& line) {
  if (options.warn) {
    options.warn(line);
  } else {
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
  }
}

Error FileStore::Impl::write_failed(int err, std::string_view what) {
  counters->add(Counter::errors);
  std::string message = std::string(what) + ": " + std::strerror(err);
  if (is_degrading_errno(err)) {
    degraded.store(true);
    retry_writes_at_ms.store(now_unix_ms() + k_degraded_retry_ms);
    if (!warned.exchange(true)) {
      warn("the cache at " + options.root.string() + " cannot be written (" + message +
           "); kcache goes on without storing new entries (reads still work). Free space, fix the "
           "permissions, or point KCACHE_DIR elsewhere.");
    }
  }
  return Error{error_code_from_errno(err), "cannot write to the cache at " + options.root.string() + ": " + message, {}};
}

bool FileStore::Impl::remove_guarded(unsigned shard, int shard_fd, const std::string& key_hex,
                                     const struct stat* pass_seen) {
  ShardLock lock(shard_fd, LOCK_EX);
  if (!lock.held()) {
    return false;
  }
  return remove_locked(shard, shard_fd, key_hex, pass_seen);
}

bool FileStore::Impl::remove_locked(unsigned shard, int shard_fd, const std::string& key_hex,
                                    const struct stat* pass_seen) {
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  struct stat pass_now {};
  const bool have_pass = io::fstatat(shard_fd, pass_name.c_str(), &pass_now, AT_SYMLINK_NOFOLLOW) == 0;
  if (have_pass && pass_seen != nullptr && !same_file(pass_now, *pass_seen)) {
    return false;  // a fresh entry replaced the one we judged: leave it
  }
  std::int64_t bytes = 0;
  bool removed_pass = false;
  if (have_pass && io::unlinkat(shard_fd, pass_name.c_str(), 0) == 0) {
    removed_pass = true;
    bytes += S_ISREG(pass_now.st_mode) ? pass_now.st_size : 0;
  } else if (have_pass && errno == EISDIR) {
    removed_pass = io::unlinkat(shard_fd, pass_name.c_str(), AT_REMOVEDIR) == 0;
  }
  if (have_pass && !removed_pass) {
    return false;
  }
  // Under the shard lock a payload without passport is always an orphan.
  struct stat payload {};
  if (io::fstatat(shard_fd, key_hex.c_str(), &payload, AT_SYMLINK_NOFOLLOW) == 0) {
    const int flags = S_ISDIR(payload.st_mode) ? AT_REMOVEDIR : 0;
    if (io::unlinkat(shard_fd, key_hex.c_str(), flags) == 0 && S_ISREG(payload.st_mode)) {
      bytes += payload.st_size;
    }
  }
  if (removed_pass) {
    // Its pin goes with it (an explicit remove, clear with pins, a damaged entry).
    const std::string pin_name = key_hex + std::string(store::k_pin_suffix);
    if (io::unlinkat(shard_fd, pin_name.c_str(), 0) == 0) {
      counters->sub(Counter::pinned_bytes, static_cast<std::uint64_t>(bytes));
      counters->sub(Counter::pinned_entries);
    }
    counters->shard_add(shard, -bytes, -1);
    if (auto key = Key::parse(key_hex); key && checks) {
      checks->forget(*key);
    }
  }
  return removed_pass;
}

}  // namespace kcache
