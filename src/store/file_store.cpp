// store/file_store.cpp: FileStore open, get, put, remove, list, stats.
// The format is docs/on-disk-format.md; maintenance is in file_store_maintenance.cpp.
#include "kcache/file_store.hpp"

#include <dirent.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>

#include "store/file_store_impl.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

namespace {

constexpr std::int64_t k_degraded_retry_ms = 30'000;

bool is_degrading_errno(int err) noexcept {
  return err == ENOSPC || err == EDQUOT || err == EACCES || err == EPERM || err == EROFS || err == EIO;
}

bool same_file(const struct stat& a, const struct stat& b) noexcept {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

// Creates `name` under `parent_fd` (mode fixed regardless of umask when we
// create it) and opens it without following a symlink.
util::Fd open_subdir(int parent_fd, const char* name, mode_t mode, int& err) {
  if (parent_fd < 0) {
    err = EBADF;
    return {};
  }
  bool created = false;
  int mkdir_err = 0;
  if (io::mkdirat(parent_fd, name, mode) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    mkdir_err = errno;  // it may still exist while we may not create (EROFS, EACCES)
  }
  util::Fd fd(io::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!fd) {
    err = errno == ENOENT && mkdir_err != 0 ? mkdir_err : errno;
    return {};
  }
  if (created && io::fchmod(fd.get(), mode) != 0) {
    err = errno;  // never leave a directory with umask-dependent modes in use
    return {};
  }
  err = 0;
  return fd;
}

}  // namespace

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

int for_each_dir_entry(int dir_fd, const std::function<void(std::string_view, unsigned char)>& fn) {
  const int fd = io::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    return errno;
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  for (;;) {
    errno = 0;
    const dirent* ent = ::readdir(dir);
    if (ent == nullptr) {
      break;
    }
    const std::string_view name(ent->d_name);
    if (name == "." || name == "..") {
      continue;
    }
    fn(name, ent->d_type);
  }
  const int err = errno;
  ::closedir(dir);
  return err;
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
    counters->shard_add(shard, -bytes, -1);
    if (auto key = Key::parse(key_hex); key && checks) {
      checks->forget(*key);
    }
  }
  return removed_pass;
}

// ---------------------------------------------------------------- open

FileStore::FileStore(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
FileStore::~FileStore() = default;

Result<std::unique_ptr<FileStore>> FileStore::open(FileStoreOptions options) {
  if (options.root.empty()) {
    return make_error(ErrorCode::invalid_argument, "the cache directory is empty; set KCACHE_DIR");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const auto& root = impl->options.root;
  const mode_t dmode = store::dir_mode(impl->options.sharing);

  std::error_code ec;
  if (root.has_parent_path()) {
    std::filesystem::create_directories(root.parent_path(), ec);
  }
  bool created_root = ::mkdir(root.c_str(), dmode) == 0;
  util::Fd root_fd(io::openat(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!root_fd) {
    const int err = errno;
    struct stat lst {};
    if (::lstat(root.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return make_error(ErrorCode::permission_denied,
                        "the cache directory " + root.string() +
                            " is a symbolic link; kcache never follows one. Set KCACHE_DIR to the real directory.");
    }
    if (err == ENOTDIR || err == ELOOP) {
      return make_error(ErrorCode::invalid_argument,
                        "the cache directory " + root.string() + " is not a directory; set KCACHE_DIR to a directory");
    }
    return make_errno_error(err, "cannot open the cache directory " + root.string() + " (set KCACHE_DIR)");
  }
  struct stat st {};
  if (io::fstat(root_fd.get(), &st) != 0) {
    return make_errno_error(errno, "cannot stat the cache directory " + root.string());
  }
  if (st.st_uid != ::geteuid()) {
    const bool group_ok = impl->options.sharing == Sharing::group && (st.st_mode & 02070) == 02070 &&
                          (st.st_gid == ::getegid() || ::group_member(st.st_gid) != 0);
    if (!group_ok) {
      return make_error(ErrorCode::permission_denied,
                        "the cache directory " + root.string() + " is owned by uid " + std::to_string(st.st_uid) +
                            ", not by you (uid " + std::to_string(::geteuid()) +
                            "); kcache refuses it. Use a directory you own (set KCACHE_DIR).");
    }
  }
  if (created_root) {
    io::fchmod(root_fd.get(), dmode);
  }
  impl->root_fd = std::move(root_fd);

  // Each directory of the layout: one that is something else (a file left
  // there, a symlink) is reported by name with its fix, never used.
  int err = 0;
  util::Fd v1 = open_subdir(impl->root_fd.get(), store::k_version_dir, dmode, err);
  if (!v1) {
    if (auto damaged = layout_damaged(impl->root_fd.get(), root, store::k_version_dir, err)) {
      return tl::unexpected(std::move(*damaged));
    }
  }
  const int v1_err = err;
  auto open_layout_dir = [&](const char* name, util::Fd& fd, int& why) -> std::optional<Error> {
    fd = open_subdir(v1.get(), name, dmode, err);
    why = v1 ? err : v1_err;
    return fd ? std::nullopt : layout_damaged(v1.get(), root, name, err);
  };
  int ignored = 0;
  for (auto [name, fd, why] : {std::tuple{store::k_entries_dir, &impl->entries_fd, &impl->entries_err},
                               std::tuple{store::k_tmp_dir, &impl->tmp_fd, &ignored},
                               std::tuple{store::k_locks_dir, &impl->locks_fd, &ignored},
                               std::tuple{store::k_stats_dir, &impl->stats_fd, &ignored}}) {
    if (auto damaged = open_layout_dir(name, *fd, *why)) {
      return tl::unexpected(std::move(*damaged));
    }
  }
  // v1/toolkit belongs to the toolkit probe (compile/toolkit.cpp), which
  // creates it when needed; here it is only checked.
  if (v1) {
    struct stat tk {};
    if (io::fstatat(v1.get(), store::k_toolkit_dir, &tk, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(tk.st_mode)) {
      return tl::unexpected(*layout_damaged(v1.get(), root, store::k_toolkit_dir, ENOTDIR));
    }
  }
  const mode_t fmode = store::file_mode(impl->options.sharing);
  impl->counters = store::SharedCounters::open(impl->stats_fd.get(), fmode);
  impl->checks = store::FileCheckTable::open(impl->stats_fd.get(), fmode,
                                             store::FileCheckTable::slots_for_cap(impl->options.max_size_bytes));
  if (impl->stats_fd) {
    util::Fd lock_fd(io::openat(impl->stats_fd.get(), store::k_evict_lock_file,
                                O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, fmode));
    if (!lock_fd) {
      lock_fd.reset(io::openat(impl->stats_fd.get(), store::k_evict_lock_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    } else {
      io::fchmod(lock_fd.get(), fmode);  // umask-proof; harmless when it fails on someone else's file
    }
    impl->evict_lock_fd = std::move(lock_fd);
  }
  if (impl->counters->fresh() && impl->entries_fd) {
    impl->recount_all();
  }
  if (impl->tmp_fd && impl->options.sweep_on_open == OpenSweep::yes) {
    impl->sweep_temps(TempSweep::remove_quick);  // cheap: one kill(2) per young temp
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(impl)));
}

// ---------------------------------------------------------------- metadata under the cap

std::uint64_t FileStore::Impl::metadata_bytes() const noexcept {
  return (counters && counters->shared() ? store::SharedCounters::k_file_size : 0) + (checks ? checks->bytes() : 0);
}

std::uint64_t FileStore::Impl::entry_budget(std::uint64_t cap) const noexcept {
  if (cap == 0) {
    return 0;
  }
  const std::uint64_t meta = metadata_bytes();
  return cap > 2 * meta ? cap - meta : cap / 2;
}

// ---------------------------------------------------------------- held shard directories

FileStore::Impl::Impl() {
  for (auto& fd : shard_fds) {
    fd.store(-1, std::memory_order_relaxed);
  }
}

FileStore::Impl::~Impl() {
  for (auto& fd : shard_fds) {
    const int held = fd.exchange(-1);
    if (held >= 0) {
      ::close(held);
    }
  }
}

int FileStore::Impl::held_shard(unsigned shard, int& err) {
  const int held = shard_fds[shard].load(std::memory_order_acquire);
  if (held >= 0) {
    return held;
  }
  util::Fd opened = open_shard(shard, CreateShard::no, err);
  if (!opened) {
    return -1;
  }
  int expected = -1;
  if (shard_fds[shard].compare_exchange_strong(expected, opened.get(), std::memory_order_acq_rel)) {
    return opened.release();
  }
  return expected;  // another thread opened it first; ours is closed
}

bool FileStore::Impl::drop_held_shard_if_removed(unsigned shard, int fd) {
  struct stat st {};
  if (io::fstat(fd, &st) != 0 || st.st_nlink != 0) {
    return false;
  }
  int expected = fd;
  if (shard_fds[shard].compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) {
    std::lock_guard<std::mutex> lock(dropped_mutex);
    dropped_shard_fds.emplace_back(fd);
  }
  return true;
}

// ---------------------------------------------------------------- passport memo

std::shared_ptr<const Passport> FileStore::Impl::memo_find(const Key& key, const struct stat& st) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  const auto it = memo.find(key);
  if (it == memo.end()) {
    return nullptr;
  }
  const PassportMemo& m = it->second;
  const bool same = m.dev == st.st_dev && m.ino == st.st_ino && m.size == st.st_size &&
                    m.mtime_ns == mtime_ns(st) &&
                    m.ctime_ns == static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  if (!same) {
    return nullptr;
  }
  return it->second.passport;
}

void FileStore::Impl::memo_store(const Key& key, const struct stat& st, std::shared_ptr<const Passport> passport) {
  if (st.st_size > k_memo_max_passport_bytes) {
    return;
  }
  PassportMemo entry;
  entry.dev = st.st_dev;
  entry.ino = st.st_ino;
  entry.size = st.st_size;
  entry.mtime_ns = mtime_ns(st);
  entry.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  entry.passport = std::move(passport);
  std::lock_guard<std::mutex> lock(memo_mutex);
  if (memo.size() >= k_memo_max_entries && !memo.contains(key)) {
    memo.clear();
  }
  memo[key] = std::move(entry);
}

void FileStore::Impl::memo_forget(const Key& key) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  memo.erase(key);
}

// ---------------------------------------------------------------- get

Result<std::optional<Artifact>> FileStore::get(const Key& key) {
  return read_entry(key, nullptr);
}

Result<std::optional<Artifact>> FileStore::get_into(const Key& key, const PayloadAllocator& allocate) {
  return read_entry(key, nullptr, nullptr, allocate ? &allocate : nullptr);
}

Result<std::optional<PayloadFile>> FileStore::open_payload(const Key& key) {
  PayloadFile file;
  auto got = read_entry(key, &file);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (!got->has_value()) {
    return std::optional<PayloadFile>{};
  }
  file.m_passport = std::move((*got)->passport);
  return std::optional<PayloadFile>(std::move(file));
}

Result<std::optional<PayloadView>> FileStore::get_view(const Key& key) {
  PayloadView view;
  auto got = read_entry(key, nullptr, &view);
  if (!got) {
    return tl::unexpected(got.error());
  }
  if (!got->has_value()) {
    return std::optional<PayloadView>{};
  }
  view.m_passport = std::move((*got)->passport);
  return std::optional<PayloadView>(std::move(view));
}

Result<std::optional<Artifact>> FileStore::read_entry(const Key& key, PayloadFile* file, PayloadView* view,
                                                      const PayloadAllocator* allocate) {
  Impl& m = *m_impl;
  const unsigned shard = key.bytes()[0];
  const std::string key_hex = key.hex();
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  auto miss = [&]() -> Result<std::optional<Artifact>> {
    m.counters->add(Counter::misses);
    return std::optional<Artifact>{};
  };

  int err = 0;
  struct HeldShard {
    int fd = -1;
    int get() const noexcept { return fd; }
  } shard_fd;
  shard_fd.fd = m.held_shard(shard, err);
  if (shard_fd.fd < 0) {
    if (err == ENOENT || err == ELOOP || err == ENOTDIR) {
      return miss();
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot open shard " + store::shard_name(shard) + " of " + m.options.root.string());
  }

  // Judge one entry; on a bad entry remove it (stat-guarded) and say so. The
  // passport is stat'ed first so that a passport this process has already
  // parsed (same file identity) is not read and parsed again.
  struct stat pass_st {};
  if (io::fstatat(shard_fd.get(), pass_name.c_str(), &pass_st, AT_SYMLINK_NOFOLLOW) != 0) {
    err = errno;
    if (err == ENOENT && m.drop_held_shard_if_removed(shard, shard_fd.get())) {
      return read_entry(key, file, view, allocate);  // the shard was removed behind our back: look in its successor
    }
    if (err == ENOENT) {
      return miss();
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot stat passport " + pass_name);
  }
  auto bad_entry = [&](std::string_view why) -> Result<std::optional<Artifact>> {
    // Count, remove and report only if the passport we judged is still the one
    // there: a concurrent writer's fresh entry is never removed or blamed.
    m.memo_forget(key);
    if (m.remove_guarded(shard, shard_fd.get(), key_hex, &pass_st)) {
      m.counters->add(Counter::corrupt);
      m.report_damaged(key, why);
    }
    return miss();
  };
  // Symlinks, FIFOs, directories and hard-linked files are never entries.
  if (!S_ISREG(pass_st.st_mode) || pass_st.st_nlink != 1 ||
      static_cast<std::uint64_t>(pass_st.st_size) > k_passport_max_bytes) {
    return bad_entry("the passport is not a regular file of at most 8 MiB with one link");
  }
  std::shared_ptr<const Passport> passport = m.memo_find(key, pass_st);
  bool parsed_now = false;  // memoised only once the payload has passed its check too
  if (!passport) {
    util::Fd pass_fd(io::openat(shard_fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    if (!pass_fd) {
      err = errno;
      if (err == ENOENT) {
        return miss();
      }
      if (err == ELOOP || err == ENXIO || err == EISDIR) {
        return bad_entry("the passport is not a regular file");
      }
      m.counters->add(Counter::errors);
      return make_errno_error(err, "cannot open passport " + pass_name);
    }
    // The file may have been replaced between the stat and the open: judge
    // (and memoise) what was opened.
    if (io::fstat(pass_fd.get(), &pass_st) != 0) {
      m.counters->add(Counter::errors);
      return make_errno_error(errno, "cannot stat passport " + pass_name);
    }
    if (!S_ISREG(pass_st.st_mode) || pass_st.st_nlink != 1 ||
        static_cast<std::uint64_t>(pass_st.st_size) > k_passport_max_bytes) {
      return bad_entry("the passport is not a regular file of at most 8 MiB with one link");
    }
    std::string pass_text;
    if (int e = io::read_bounded(pass_fd.get(), k_passport_max_bytes, pass_text,
                                 static_cast<std::size_t>(pass_st.st_size));
        e != 0) {
      m.counters->add(Counter::errors);
      return make_errno_error(e, "cannot read passport " + pass_name);
    }
    auto parsed = Passport::from_json(pass_text);
    if (!parsed) {
      return bad_entry(parsed.error().message);
    }
    if (auto identity = check_entry_identity(key, *parsed); !identity) {
      return bad_entry(identity.error().message);
    }
    passport = std::make_shared<const Passport>(std::move(*parsed));
    parsed_now = true;
  }

  util::Fd payload_fd(io::openat(shard_fd.get(), key_hex.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  if (!payload_fd) {
    err = errno;
    if (err == ENOENT) {
      // Either evicted between our two opens (passport gone too) or a
      // passport without payload (bad entry).
      struct stat again {};
      if (io::fstatat(shard_fd.get(), pass_name.c_str(), &again, AT_SYMLINK_NOFOLLOW) != 0) {
        return miss();
      }
      return bad_entry("the payload file is missing");
    }
    if (err == ELOOP || err == ENXIO || err == EISDIR) {
      return bad_entry("the payload is not a regular file");
    }
    m.counters->add(Counter::errors);
    return make_errno_error(err, "cannot open payload " + key_hex);
  }
  struct stat payload_st {};
  if (io::fstat(payload_fd.get(), &payload_st) != 0) {
    m.counters->add(Counter::errors);
    return make_errno_error(errno, "cannot stat payload " + key_hex);
  }
  // A memoised passport is trusted by its file's identity (device, inode,
  // size, mtime, ctime). A passport rewritten within one timestamp tick into a
  // reused inode can look identical: when the payload disagrees with a
  // memoised passport, judge again from the file before calling it damaged.
  auto judge_again = [&]() -> Result<std::optional<Artifact>> {
    m.memo_forget(key);
    return read_entry(key, file, view, allocate);
  };
  if (!S_ISREG(payload_st.st_mode) || payload_st.st_nlink != 1 ||
      static_cast<std::uint64_t>(payload_st.st_size) != passport->payload_size) {
    if (!parsed_now && S_ISREG(payload_st.st_mode)) {
      return judge_again();
    }
    return bad_entry(!S_ISREG(payload_st.st_mode) || payload_st.st_nlink != 1
                         ? std::string("the payload is not a regular file with one link")
                         : "the payload is " + std::to_string(payload_st.st_size) + " bytes, the passport says " +
                               std::to_string(passport->payload_size));
  }
  // The payload's size was checked against the passport above; its bytes are
  // read (or, for open_payload, only hashed) in chunks and checked while hot.
  Artifact artifact;
  Payload bytes;
  const auto check = view != nullptr ? m.check_payload_view(key, payload_fd.get(), payload_st, *passport, *view)
                                     : m.check_payload(key, payload_fd.get(), payload_st, *passport,
                                                       file == nullptr ? &bytes : nullptr, allocate);
  if (check.verdict == Impl::PayloadVerdict::bad) {
    if (!parsed_now) {
      return judge_again();
    }
    return bad_entry("the payload's SHA-256 does not match the passport");
  }
  if (check.verdict == Impl::PayloadVerdict::error) {
    m.counters->add(Counter::errors);
    return make_errno_error(check.err, "cannot read payload " + key_hex);
  }
  if (parsed_now) {
    m.memo_store(key, pass_st, passport);
  }

  // Refresh the last-use stamp at coarse granularity (LRU). This changes the
  // passport's mtime and ctime, so the memo is re-bound to the new identity.
  const std::int64_t interval_ns = static_cast<std::int64_t>(m.options.touch_interval.count()) * 1'000'000'000;
  if (now_unix_ns() - mtime_ns(pass_st) >= interval_ns) {
    util::Fd touch_fd(io::openat(shard_fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    struct stat touched {};
    if (touch_fd && io::fstat(touch_fd.get(), &touched) == 0 && same_file(touched, pass_st) &&
        io::futimens(touch_fd.get(), nullptr) == 0 && io::fstat(touch_fd.get(), &touched) == 0) {
      m.memo_store(key, touched, passport);
    }
  }
  m.counters->add(Counter::hits);
  m.counters->add(Counter::bytes_read, passport->payload_size);
  m.counters->add(Counter::compile_us_saved, passport->compile_duration_us);
  artifact.passport = *passport;
  artifact.payload = std::move(bytes);  // the buffer read into (or the mapping), not copied
  if (file != nullptr) {
    file->m_ino = static_cast<std::uint64_t>(payload_st.st_ino);
    file->m_mtime_ns = mtime_ns(payload_st);
    file->m_ctime_ns = static_cast<std::int64_t>(payload_st.st_ctim.tv_sec) * 1'000'000'000 + payload_st.st_ctim.tv_nsec;
    file->m_fd = payload_fd.release();
  }
  return std::optional<Artifact>(std::move(artifact));
}

// ---------------------------------------------------------------- put

Result<PutOutcome> FileStore::put(const Artifact& artifact) {
  if (auto v = artifact.verify(); !v) {
    return make_error(ErrorCode::invalid_argument, "refusing to store an artifact that does not verify: " +
                                                       v.error().message);
  }
  return m_impl->put_checked(artifact, m_impl->options.fsync);
}

Result<PutOutcome> FileStore::fill(const Artifact& artifact) {
  if (auto v = artifact.verify_shape(); !v) {
    return make_error(ErrorCode::invalid_argument, "refusing to store a malformed artifact: " + v.error().message);
  }
  return m_impl->put_checked(artifact, FsyncPolicy::none);
}

Result<PutOutcome> FileStore::Impl::put_checked(const Artifact& artifact, FsyncPolicy fsync) {
  if (auto skipped = check_writable(); !skipped) {
    return tl::unexpected(skipped.error());
  }
  const Key& key = artifact.passport.key;
  const unsigned shard = key.bytes()[0];
  int err = 0;
  util::Fd shard_fd = open_shard(shard, CreateShard::yes, err);
  if (!shard_fd) {
    return tl::unexpected(shard_open_failed(shard, err));
  }
  struct stat existing {};
  const std::string pass_name = key.hex() + std::string(store::k_passport_suffix);
  if (io::fstatat(shard_fd.get(), pass_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    return PutOutcome::already_present;
  }
  if (!tmp_fd) {
    return tl::unexpected(write_failed(EACCES, "no usable staging directory v1/tmp"));
  }
  const std::string json = artifact.passport.to_json();
  // Room under the cap first, so that the staged bytes are counted in it.
  const Impl::RoomGuard room(*counters, make_room(artifact.payload.size() + json.size()));
  const std::string tmp_payload = new_temp_name();
  if (int e = stage(tmp_payload, [&](int fd) { return io::write_all(fd, artifact.payload); }, fsync); e != 0) {
    return tl::unexpected(write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  return publish_staged(shard, shard_fd.get(), artifact.passport, json, tmp_payload, fsync);
}

Result<StreamedPut> FileStore::put_stream(int fd, const PassportForPayload& make_passport) {
  Impl& m = *m_impl;
  if (auto skipped = m.check_writable(); !skipped) {
    return tl::unexpected(skipped.error());
  }
  if (!m.tmp_fd) {
    return tl::unexpected(m.write_failed(EACCES, "no usable staging directory v1/tmp"));
  }
  // Room under the cap for what a regular file says it holds (a pipe's size is
  // not known ahead: its entry is settled by eviction after it is published).
  struct stat in_st {};
  const bool sized = io::fstat(fd, &in_st) == 0 && S_ISREG(in_st.st_mode);
  constexpr std::uint64_t k_passport_estimate = 4096;
  const Impl::RoomGuard room(
      *m.counters, sized ? m.make_room(static_cast<std::uint64_t>(in_st.st_size) + k_passport_estimate) : -1);
  // One pass over the input: each chunk is hashed and written to the staged file.
  const std::string tmp_payload = m.new_temp_name();
  util::Sha256 sha;
  std::uint64_t size = 0;
  int read_err = 0;
  const int e = m.stage(tmp_payload, [&](int out) {
    constexpr std::size_t k_chunk = 1 << 20;
    const auto buffer = std::make_unique_for_overwrite<char[]>(k_chunk);
    for (;;) {
      const ssize_t n = io::read(fd, buffer.get(), k_chunk);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        read_err = errno;
        return read_err;
      }
      if (n == 0) {
        return 0;
      }
      sha.update(buffer.get(), static_cast<std::size_t>(n));
      size += static_cast<std::uint64_t>(n);
      if (int w = io::write_all(out, std::string_view(buffer.get(), static_cast<std::size_t>(n))); w != 0) {
        return w;
      }
    }
  }, m.options.fsync);
  if (read_err != 0) {
    return make_errno_error(read_err, "cannot read the input to store");
  }
  if (e != 0) {
    return tl::unexpected(m.write_failed(e, "cannot stage the payload in v1/tmp"));
  }
  auto discard = [&] { io::unlinkat(m.tmp_fd.get(), tmp_payload.c_str(), 0); };
  const auto digest = sha.finish();
  auto passport = make_passport(size, digest);
  if (!passport) {
    discard();
    return tl::unexpected(passport.error());
  }
  if (passport->payload_size != size || passport->payload_sha256 != util::to_hex(digest.data(), digest.size()) ||
      passport->format != k_passport_format_version || !is_valid_kind(passport->kind)) {
    discard();
    return make_error(ErrorCode::invalid_argument,
                      "refusing to store a payload whose passport does not name its size and SHA-256");
  }
  const unsigned shard = passport->key.bytes()[0];
  int err = 0;
  util::Fd shard_fd = m.open_shard(shard, CreateShard::yes, err);
  if (!shard_fd) {
    discard();
    return tl::unexpected(m.shard_open_failed(shard, err));
  }
  auto outcome = m.publish_staged(shard, shard_fd.get(), *passport, passport->to_json(), tmp_payload, m.options.fsync);
  if (!outcome) {
    return tl::unexpected(outcome.error());
  }
  return StreamedPut{*outcome, std::move(*passport)};
}

// ---------------------------------------------------------------- put: staging and publishing

Result<void> FileStore::Impl::check_writable() {
  if (degraded.load() && now_unix_ms() < retry_writes_at_ms.load()) {
    counters->add(Counter::puts_skipped);
    return make_error(ErrorCode::read_only, "the cache at " + options.root.string() +
                                                " is degraded (a write failed earlier); write skipped");
  }
  return {};
}

Error FileStore::Impl::shard_open_failed(unsigned shard, int err) {
  if (err == ELOOP || err == ENOTDIR) {
    counters->add(Counter::errors);
    return Error{ErrorCode::corrupt,
                 "shard " + store::shard_name(shard) + " is not a directory (a symlink?); run `kcache verify --repair`",
                 {}};
  }
  return write_failed(err, "cannot create shard directory " + store::shard_name(shard));
}

int FileStore::Impl::stage(const std::string& name, const std::function<int(int fd)>& write, FsyncPolicy fsync) {
  const mode_t fmode = store::file_mode(options.sharing);
  util::Fd fd(io::openat(tmp_fd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, fmode));
  if (!fd) {
    return errno;
  }
  int e = write(fd.get());
  if (e == 0 && io::fchmod(fd.get(), fmode) != 0) {
    e = errno;
  }
  if (e == 0 && fsync != FsyncPolicy::none && io::fsync(fd.get()) != 0) {
    e = errno;
  }
  if (e != 0) {
    io::unlinkat(tmp_fd.get(), name.c_str(), 0);
  }
  return e;
}

Result<PutOutcome> FileStore::Impl::publish_staged(unsigned shard, int shard_fd, const Passport& passport,
                                                   const std::string& json, const std::string& tmp_payload,
                                                   FsyncPolicy fsync) {
  const std::string key_hex = passport.key.hex();
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  const std::string tmp_pass = new_temp_name();
  bool payload_staged = true;
  bool pass_staged = false;
  auto cleanup = [&] {
    if (payload_staged) {
      io::unlinkat(tmp_fd.get(), tmp_payload.c_str(), 0);
    }
    if (pass_staged) {
      io::unlinkat(tmp_fd.get(), tmp_pass.c_str(), 0);
    }
  };
  if (int e = stage(tmp_pass, [&](int fd) { return io::write_all(fd, json); }, fsync); e != 0) {
    cleanup();
    return tl::unexpected(write_failed(e, "cannot stage the passport in v1/tmp"));
  }
  pass_staged = true;
  struct stat existing {};
  {
    ShardLock lock(shard_fd, LOCK_EX);
    if (!lock.held()) {
      cleanup();
      return tl::unexpected(write_failed(lock.error(), "cannot lock shard " + store::shard_name(shard)));
    }
    if (io::fstatat(shard_fd, pass_name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
      cleanup();
      return PutOutcome::already_present;
    }
    if (io::renameat(tmp_fd.get(), tmp_payload.c_str(), shard_fd, key_hex.c_str()) != 0) {
      const int e = errno;
      cleanup();
      return tl::unexpected(write_failed(e, "cannot publish the payload"));
    }
    payload_staged = false;
    if (io::renameat(tmp_fd.get(), tmp_pass.c_str(), shard_fd, pass_name.c_str()) != 0) {
      const int e = errno;
      io::unlinkat(shard_fd, key_hex.c_str(), 0);  // our orphan: we hold the lock
      cleanup();
      return tl::unexpected(write_failed(e, "cannot publish the passport"));
    }
    pass_staged = false;
    if (fsync == FsyncPolicy::file_and_directory && io::fsync(shard_fd) != 0) {
      // Published but not known durable: take it back rather than report an
      // entry that may vanish on a crash.
      const int e = errno;
      io::unlinkat(shard_fd, pass_name.c_str(), 0);
      io::unlinkat(shard_fd, key_hex.c_str(), 0);
      return tl::unexpected(write_failed(e, "cannot fsync shard directory " + store::shard_name(shard)));
    }
    counters->shard_add(shard, static_cast<std::int64_t>(passport.payload_size + json.size()), 1);
  }
  memo_forget(passport.key);
  degraded.store(false);
  counters->add(Counter::puts);
  counters->add(Counter::bytes_written, passport.payload_size + json.size());
  maybe_evict();
  return PutOutcome::stored;
}

// ---------------------------------------------------------------- remove, list, stats

Result<bool> FileStore::remove(const Key& key) {
  Impl& m = *m_impl;
  int err = 0;
  util::Fd shard_fd = m.open_shard(key.bytes()[0], CreateShard::no, err);
  if (!shard_fd) {
    if (err == ENOENT) {
      return false;
    }
    return make_errno_error(err, "cannot open shard " + key.shard());
  }
  ShardLock lock(shard_fd.get(), LOCK_EX);
  if (!lock.held()) {
    return make_errno_error(lock.error(), "cannot lock shard " + key.shard());
  }
  m.memo_forget(key);
  const std::string key_hex = key.hex();
  struct stat st {};
  const bool had = io::fstatat(shard_fd.get(), (key_hex + ".pass").c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!had) {
    m.remove_locked(key.bytes()[0], shard_fd.get(), key_hex, nullptr);  // sweep an orphan payload
    return false;
  }
  if (!m.remove_locked(key.bytes()[0], shard_fd.get(), key_hex, nullptr)) {
    return make_errno_error(errno, "cannot remove entry " + key_hex);
  }
  return true;
}

Result<std::vector<EntryInfo>> FileStore::list() {
  Impl& m = *m_impl;
  std::vector<EntryInfo> out;
  for (unsigned shard = 0; shard < store::k_shard_count; ++shard) {
    int err = 0;
    util::Fd shard_fd = m.open_shard(shard, CreateShard::no, err);
    if (!shard_fd) {
      continue;
    }
    for_each_dir_entry(shard_fd.get(), [&](std::string_view name, unsigned char) {
      std::string_view key_hex;
      if (store::classify_entry_name(name, shard, key_hex) != store::EntryName::passport) {
        return;
      }
      const std::string pass_name(name);
      util::Fd fd(io::openat(shard_fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
      struct stat st {};
      if (!fd || io::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<std::uint64_t>(st.st_size) > k_passport_max_bytes) {
        return;
      }
      std::string text;
      if (io::read_bounded(fd.get(), k_passport_max_bytes, text, static_cast<std::size_t>(st.st_size)) != 0) {
        return;
      }
      auto passport = Passport::from_json(text);
      if (!passport || passport->key.hex() != key_hex) {
        return;
      }
      out.push_back(EntryInfo{passport->key, passport->kind, passport->payload_size, passport->created_unix_ms,
                              mtime_ns(st) / 1'000'000});
    });
  }
  return out;
}

Result<StoreStats> FileStore::stats() {
  const Impl& m = *m_impl;
  const auto& c = *m.counters;
  StoreStats s;
  s.hits = c.get(Counter::hits);
  s.misses = c.get(Counter::misses);
  s.puts = c.get(Counter::puts);
  s.puts_skipped = c.get(Counter::puts_skipped);
  s.evictions = c.get(Counter::evictions);
  s.corrupt = c.get(Counter::corrupt);
  s.errors = c.get(Counter::errors);
  s.bytes_read = c.get(Counter::bytes_read);
  s.bytes_written = c.get(Counter::bytes_written);
  s.compile_us_saved = c.get(Counter::compile_us_saved);
  s.entries = c.total_entries();
  s.size_bytes = c.total_bytes();
  s.metadata_bytes = m.metadata_bytes();
  s.max_size_bytes = m.options.max_size_bytes;
  const TempScan temps = m_impl->scan_temps(TempSweep::count);
  s.temp_files = temps.files;
  s.temp_bytes = temps.bytes;
  s.stale_temp_files = temps.stale_files;
  s.stale_temp_bytes = temps.stale_bytes;
  return s;
}

bool FileStore::degraded() const noexcept { return m_impl->degraded.load(); }

const FileStoreOptions& FileStore::options() const noexcept { return m_impl->options; }

}  // namespace kcache
