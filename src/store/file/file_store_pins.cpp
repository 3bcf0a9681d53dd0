// store/file/file_store_pins.cpp: pinned entries (FileStore::pin / unpin).
//
// A pin is an empty marker file `<key>.pin` beside the entry in its shard
// (docs/on-disk-format.md, "Pinned entries"). It is created and removed under
// the shard's flock, as entries are published and removed, so an eviction
// step (which checks for it under the same lock before it removes an entry)
// never removes a pinned entry. The pinned bytes and entries of the whole
// cache are two words of stats/counters, changed with the markers.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "kcache/file_store.hpp"
#include "store/file/file_store_impl.hpp"
#include "util/posix_io.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

namespace {

std::string describe_size(std::uint64_t bytes) {
  return std::to_string(bytes) + " bytes";
}

}  // namespace

Result<bool> FileStore::pin(const Key& key) {
  Impl& m = *m_impl;
  const std::string key_hex = key.hex();
  const auto no_entry = [&] {
    return make_error(ErrorCode::not_found, "no entry " + key_hex + " in the cache at " + m.options.root.string() +
                                                " to pin (pin an entry after it is stored)");
  };
  auto shard_fd = m.existing_shard(key);
  if (!shard_fd) {
    return tl::unexpected(shard_fd.error());
  }
  if (!*shard_fd) {
    return no_entry();
  }
  ShardLock lock(shard_fd->get(), LOCK_EX);
  if (!lock.held()) {
    return make_errno_error(lock.error(), "cannot lock shard " + key.shard());
  }
  struct stat ps {};
  struct stat ds {};
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  if (io::fstatat(shard_fd->get(), pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(ps.st_mode) ||
      io::fstatat(shard_fd->get(), key_hex.c_str(), &ds, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(ds.st_mode)) {
    return no_entry();
  }
  const std::string pin_name = key_hex + std::string(store::k_pin_suffix);
  util::Fd marker(io::openat(shard_fd->get(), pin_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
                             store::file_mode(m.options.sharing)));
  if (!marker) {
    if (errno == EEXIST) {
      return false;
    }
    return make_errno_error(errno, "cannot pin entry " + key_hex + " in the cache at " + m.options.root.string());
  }
  io::fchmod(marker.get(), store::file_mode(m.options.sharing));
  m.counters->add(Counter::pinned_bytes, static_cast<std::uint64_t>(ps.st_size + ds.st_size));
  m.counters->add(Counter::pinned_entries);
  return true;
}

Result<bool> FileStore::unpin(const Key& key) {
  Impl& m = *m_impl;
  const std::string key_hex = key.hex();
  auto shard_fd = m.existing_shard(key);
  if (!shard_fd) {
    return tl::unexpected(shard_fd.error());
  }
  if (!*shard_fd) {
    return false;
  }
  ShardLock lock(shard_fd->get(), LOCK_EX);
  if (!lock.held()) {
    return make_errno_error(lock.error(), "cannot lock shard " + key.shard());
  }
  const std::string pin_name = key_hex + std::string(store::k_pin_suffix);
  if (io::unlinkat(shard_fd->get(), pin_name.c_str(), 0) != 0) {
    if (errno == ENOENT) {
      return false;
    }
    return make_errno_error(errno, "cannot unpin entry " + key_hex + " in the cache at " + m.options.root.string());
  }
  // A pin is counted while its entry is there: one whose entry vanished
  // behind kcache's back is left to the next recount.
  struct stat ps {};
  struct stat ds {};
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  if (io::fstatat(shard_fd->get(), pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) == 0 &&
      io::fstatat(shard_fd->get(), key_hex.c_str(), &ds, AT_SYMLINK_NOFOLLOW) == 0) {
    m.counters->sub(Counter::pinned_bytes, static_cast<std::uint64_t>(ps.st_size + ds.st_size));
    m.counters->sub(Counter::pinned_entries);
  }
  return true;
}

bool FileStore::pinned(const Key& key) const {
  const Impl& m = *m_impl;
  int err = 0;
  util::Fd shard_fd = m.open_shard(key.bytes()[0], CreateShard::no, err);
  struct stat st {};
  return shard_fd && io::fstatat(shard_fd.get(), (key.hex() + std::string(store::k_pin_suffix)).c_str(), &st,
                                 AT_SYMLINK_NOFOLLOW) == 0;
}

Result<util::Fd> FileStore::Impl::existing_shard(const Key& key) const {
  int err = 0;
  util::Fd fd = open_shard(key.bytes()[0], CreateShard::no, err);
  if (!fd && err != ENOENT) {
    return make_errno_error(err, "cannot open shard " + key.shard());
  }
  return fd;
}

Result<void> FileStore::Impl::check_pins_leave_room(std::uint64_t bytes, const Key* key) {
  const std::uint64_t budget = entry_budget(options.max_size_bytes);
  if (budget == 0) {
    return {};
  }
  const std::uint64_t pinned = counters->get(Counter::pinned_bytes);
  if (pinned == 0 || pinned + bytes <= budget) {
    return {};
  }
  counters->add(Counter::puts_skipped);
  const std::string what = "pinned entries hold " + describe_size(pinned) + " of the " +
                           describe_size(budget) + " the size cap (max_size) leaves for entries in " +
                           options.root.string() + ", so " +
                           (key != nullptr ? "entry " + key->hex() : std::string("an entry")) + " of " +
                           describe_size(bytes) +
                           " is not stored (pinned entries are never evicted): unpin some (`kcache unpin KEY`) or "
                           "raise max_size";
  if (!warned_pins.exchange(true)) {
    warn(what);
  }
  return make_error(ErrorCode::no_space, what);
}

}  // namespace kcache
