#include "util/posix_io.hpp"

#include <dirent.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "util/fault.hpp"

namespace kcache::util::io {

namespace {

// Applies a `fail` decision: sets errno and returns true when the call must fail.
bool injected_failure(fault::Op op) noexcept {
  const fault::Decision d = fault::check(op);
  if (d.action == fault::Action::fail) {
    errno = d.err;
    return true;
  }
  return false;
}

}  // namespace

int openat(int dirfd, const char* path, int flags, mode_t mode) noexcept {
  if (injected_failure(fault::Op::open)) {
    return -1;
  }
  return ::openat(dirfd, path, flags | O_CLOEXEC, mode);
}

namespace {
// The fault seam of a read or write: false (errno set) for an injected
// failure; an injected short transfer halves `size` (at least one byte).
bool transfer_allowed(fault::Op op, std::size_t& size) noexcept {
  const fault::Decision d = fault::check(op);
  if (d.action == fault::Action::fail) {
    errno = d.err;
    return false;
  }
  if (d.action == fault::Action::short_transfer && size > 1) {
    size = std::max<std::size_t>(1, size / 2);
  }
  return true;
}
}  // namespace

ssize_t read(int fd, void* buf, std::size_t size) noexcept {
  return transfer_allowed(fault::Op::read, size) ? ::read(fd, buf, size) : -1;
}

ssize_t write(int fd, const void* buf, std::size_t size) noexcept {
  return transfer_allowed(fault::Op::write, size) ? ::write(fd, buf, size) : -1;
}

int fsync(int fd) noexcept {
  if (injected_failure(fault::Op::fsync)) {
    return -1;
  }
  return ::fsync(fd);
}

int renameat(int old_dirfd, const char* old_path, int new_dirfd, const char* new_path) noexcept {
  if (injected_failure(fault::Op::rename)) {
    return -1;
  }
  return ::renameat(old_dirfd, old_path, new_dirfd, new_path);
}

int unlinkat(int dirfd, const char* path, int flags) noexcept {
  if (injected_failure(fault::Op::unlink)) {
    return -1;
  }
  return ::unlinkat(dirfd, path, flags);
}

int mkdirat(int dirfd, const char* path, mode_t mode) noexcept {
  if (injected_failure(fault::Op::mkdir)) {
    return -1;
  }
  return ::mkdirat(dirfd, path, mode);
}

int fstat(int fd, struct stat* st) noexcept {
  if (injected_failure(fault::Op::stat)) {
    return -1;
  }
  return ::fstat(fd, st);
}

int fstatat(int dirfd, const char* path, struct stat* st, int flags) noexcept {
  if (injected_failure(fault::Op::stat)) {
    return -1;
  }
  return ::fstatat(dirfd, path, st, flags);
}

int fchmod(int fd, mode_t mode) noexcept {
  if (injected_failure(fault::Op::chmod)) {
    return -1;
  }
  return ::fchmod(fd, mode);
}

int futimens(int fd, const struct timespec times[2]) noexcept {
  if (injected_failure(fault::Op::utime)) {
    return -1;
  }
  return ::futimens(fd, times);
}

int flock(int fd, int operation) noexcept {
  if (injected_failure(fault::Op::lock)) {
    return -1;
  }
  return ::flock(fd, operation);
}

int ftruncate(int fd, off_t length) noexcept {
  if (injected_failure(fault::Op::truncate)) {
    return -1;
  }
  return ::ftruncate(fd, length);
}

int linkat(int old_dirfd, const char* old_path, int new_dirfd, const char* new_path,
           int flags) noexcept {
  if (injected_failure(fault::Op::link)) {
    return -1;
  }
  return ::linkat(old_dirfd, old_path, new_dirfd, new_path, flags);
}

int write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = io::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    if (n == 0) {
      return EIO;  // a regular file never accepts zero bytes of a non-empty write
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

std::optional<std::string> read_small_file(const std::string& path, std::size_t max_size, int open_flags) {
  std::string bytes;
  return read_small_file_into(path, max_size, bytes, open_flags) ? std::optional<std::string>(std::move(bytes))
                                                                 : std::nullopt;
}

bool read_small_file_into(const std::string& path, std::size_t max_size, std::string& out, int open_flags) {
  // O_NONBLOCK: a FIFO at `path` is refused below (not a regular file), never waited on.
  const int fd = io::openat(AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | open_flags);
  if (fd < 0) {
    return false;
  }
  struct stat st {};
  const bool ok = io::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) <= max_size &&
                  read_bounded(fd, max_size, out, static_cast<std::size_t>(st.st_size)) == 0 && out.size() <= max_size;
  ::close(fd);
  return ok;
}

int read_bounded(int fd, std::size_t max_size, std::string& out, std::size_t size_hint) {
  // A byte past the bound shows a file over it; SIZE_MAX (no bound) must not wrap to 0.
  const std::size_t limit = max_size == SIZE_MAX ? max_size : max_size + 1;
  out.resize(std::min(limit, std::max<std::size_t>(size_hint + 1, 4096)));
  std::size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (out.size() >= limit) {
        break;
      }
      out.resize(std::min(limit, out.size() * 2));
    }
    const ssize_t n = io::read(fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int err = errno;
      out.clear();
      return err;
    }
    if (n == 0) {
      break;
    }
    have += static_cast<std::size_t>(n);
  }
  out.resize(have);
  return 0;
}

int lock(int fd, int operation) noexcept {
  for (;;) {
    if (io::flock(fd, operation) == 0) {
      return 0;
    }
    if (errno != EINTR) {
      return errno;
    }
  }
}

int for_each_dir_entry(int dir_fd, const std::function<void(std::string_view, unsigned char)>& fn) {
  const int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY);
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

}  // namespace kcache::util::io
