// store/file/file_store.cpp: FileStore open, remove, list, stats. The format is
// docs/on-disk-format.md; reads are in file_store_read.cpp, puts in
// file_store_write.cpp, maintenance in file_store_maintenance.cpp and file_store_verify.cpp.
#include "kcache/file_store.hpp"

#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "store/file/file_store_impl.hpp"
#include "store/file/request_file.hpp"
#include "util/posix_io.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

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

  // Open first: the root exists in every process but the first.
  util::Fd root_fd(io::openat(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  bool created_root = false;
  int mkdir_err = 0;  // why the root could not be made (EACCES, EROFS), when it could not
  if (!root_fd && errno == ENOENT) {
    // Its parent exists nearly always: made (with its own parents) only
    // when the mkdir says it is missing.
    created_root = ::mkdir(root.c_str(), dmode) == 0;
    mkdir_err = created_root ? 0 : errno;
    if (!created_root && errno == ENOENT && root.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(root.parent_path(), ec);
      created_root = ::mkdir(root.c_str(), dmode) == 0;
      mkdir_err = created_root ? 0 : (ec ? ec.value() : errno);
    }
    root_fd.reset(io::openat(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  }
  if (!root_fd && mkdir_err != 0 && mkdir_err != EEXIST) {
    // Missing and not creatable: say why it cannot be made, not that it is missing.
    return make_errno_error(mkdir_err, "cannot create the cache directory " + root.string() +
                                           " (set KCACHE_DIR to a directory you can write)");
  }
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
  // A root that mkdir gave exactly `dmode` (setgid included) tells that the
  // umask takes none of its bits: the layout directories made under it in
  // this call get `dmode` too and are not fchmod-ed (4 system calls of a
  // cold compile into a new directory). Otherwise each is fchmod-ed as made.
  const bool mode_exact = created_root && (st.st_mode & 07777) == dmode;
  if (created_root && !mode_exact) {
    io::fchmod(root_fd.get(), dmode);
  }
  impl->root_fd = std::move(root_fd);

  // Each directory of the layout: one that is something else (a file left
  // there, a symlink) is reported by name with its fix, never used.
  // A root made just now holds nothing: each directory of the layout is
  // created, not first looked for, and nothing in it is checked or swept
  // (a cold compile into a new directory: docs/performance.md, "Cold CLI compile").
  int err = 0;
  bool made_v1 = false;
  util::Fd v1 = open_subdir(impl->root_fd.get(), store::k_version_dir, dmode, err, &made_v1,
                            !created_root ? ParentDir::existing
                            : mode_exact  ? ParentDir::made_now_mode_exact
                                          : ParentDir::made_now);
  if (!v1) {
    if (auto damaged = layout_damaged(impl->root_fd.get(), root, store::k_version_dir, err)) {
      return tl::unexpected(std::move(*damaged));
    }
  }
  const int v1_err = err;
  bool made_entries = false;
  bool made_tmp = false;
  auto open_layout_dir = [&](const char* name, util::Fd& fd, int& why) -> std::optional<Error> {
    bool* made = name == store::k_entries_dir ? &made_entries : name == store::k_tmp_dir ? &made_tmp : nullptr;
    fd = open_subdir(v1.get(), name, dmode, err, made, !made_v1 ? ParentDir::existing
                                                       : mode_exact ? ParentDir::made_now_mode_exact
                                                                    : ParentDir::made_now);
    why = v1 ? err : v1_err;
    return fd ? std::nullopt : layout_damaged(v1.get(), root, name, err);
  };
  int ignored = 0;
  for (auto [name, fd, why] : {std::tuple{store::k_entries_dir, &impl->entries_fd, &impl->entries_err},
                               std::tuple{store::k_tmp_dir, &impl->tmp_fd, &ignored},
                               std::tuple{store::k_stats_dir, &impl->stats_fd, &ignored}}) {
    if (auto damaged = open_layout_dir(name, *fd, *why)) {
      return tl::unexpected(std::move(*damaged));
    }
  }
  // v1/locks belongs to the single-flight locks (cache/single_flight.cpp),
  // which make it when a compile needs a lock and remove it when left empty;
  // v1/toolkit to the toolkit probe's fallback memo (compile/toolkit.cpp).
  // Here they are only checked.
  if (v1 && !made_v1) {
    for (const char* name : {store::k_locks_dir, store::k_toolkit_dir}) {
      struct stat sub {};
      if (io::fstatat(v1.get(), name, &sub, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sub.st_mode)) {
        return tl::unexpected(*layout_damaged(v1.get(), root, name, ENOTDIR));
      }
    }
  }
  const mode_t fmode = store::file_mode(impl->options.sharing);
  impl->counters = store::SharedCounters::open(impl->stats_fd.get(), fmode);
  // In a stats/ made just now the check table is made by its first use: a
  // cold compile into a new directory checks no payload and makes none.
  impl->checks = store::FileCheckTable::open(impl->stats_fd.get(), fmode,
                                             store::FileCheckTable::slots_for_cap(impl->options.max_size_bytes),
                                             made_v1 ? store::FileCheckTable::TableFile::on_first_use
                                                     : store::FileCheckTable::TableFile::now);
  // New counters over old entries (removed or damaged counters): count them.
  // Not over entries/ made just now: it holds nothing yet, and a put of
  // another process counts itself in the counters it opened.
  if (impl->counters->fresh() && impl->entries_fd && !made_entries) {
    impl->recount_all();
  }
  if (impl->checks) {
    impl->checks->fit(impl->counters->total_entries());  // a table made small grows with the cache
  }
  // A tmp/ made just now holds no leftover of anyone to sweep.
  if (impl->tmp_fd && impl->options.sweep_on_open == OpenSweep::yes && !made_tmp) {
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

int FileStore::Impl::evict_lock() {
  if (const int fd = evict_lock_held_fd.load(std::memory_order_acquire); fd >= 0) {
    return fd;
  }
  std::lock_guard<std::mutex> lock(evict_lock_open_mutex);
  if (const int fd = evict_lock_held_fd.load(std::memory_order_acquire); fd >= 0 || !stats_fd) {
    return fd;
  }
  const mode_t fmode = store::file_mode(options.sharing);
  util::Fd lock_fd(io::openat(stats_fd.get(), store::k_evict_lock_file, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK,
                              fmode));
  if (!lock_fd) {
    lock_fd.reset(io::openat(stats_fd.get(), store::k_evict_lock_file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
  } else {
    io::fchmod(lock_fd.get(), fmode);  // umask-proof; harmless when it fails on someone else's file
  }
  const int fd = lock_fd.release();
  evict_lock_held_fd.store(fd, std::memory_order_release);
  return fd;
}

FileStore::Impl::~Impl() {
  if (const int fd = evict_lock_held_fd.exchange(-1); fd >= 0) {
    ::close(fd);
  }
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
    const std::size_t shard_first = out.size();
    std::vector<std::string> pins;
    for_each_dir_entry(shard_fd.get(), [&](std::string_view name, unsigned char) {
      std::string_view key_hex;
      const auto kind = store::classify_entry_name(name, shard, key_hex);
      if (kind == store::EntryName::pin) {
        pins.emplace_back(key_hex);
      }
      if (kind != store::EntryName::passport) {
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
    std::sort(pins.begin(), pins.end());
    for (std::size_t i = shard_first; i < out.size() && !pins.empty(); ++i) {
      out[i].pinned = std::binary_search(pins.begin(), pins.end(), out[i].key.hex());
    }
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
  s.pinned_entries = c.get(Counter::pinned_entries);
  s.pinned_bytes = c.get(Counter::pinned_bytes);
  const std::uint64_t budget = m.entry_budget(m.options.max_size_bytes);
  s.pins_over_cap = budget != 0 && s.pinned_bytes != 0 && s.pinned_bytes >= budget;
  return s;
}

bool FileStore::degraded() const noexcept { return m_impl->degraded.load(); }

RequestStats* FileStore::request_stats() noexcept {
  Impl& m = *m_impl;
  try {
    std::call_once(m.requests_once, [&m] {
      m.requests = store::open_request_stats(m.stats_fd ? m.stats_fd.get() : -1, store::file_mode(m.options.sharing));
    });
  } catch (...) {
    return nullptr;  // no memory for the counters: the request is not counted
  }
  return m.requests.get();
}

const char* eviction_policy_name(EvictionPolicy policy) noexcept {
  switch (policy) {
    case EvictionPolicy::lru:
      return "lru";
    case EvictionPolicy::gds:
      return "gds";
    case EvictionPolicy::cost:
      break;
  }
  return "cost";
}

const FileStoreOptions& FileStore::options() const noexcept { return m_impl->options; }

}  // namespace kcache
