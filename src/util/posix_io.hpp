// util/posix_io.hpp: the narrow interface through which every file I/O call of
// the stores goes, so that util/fault.hpp can inject failures (EIO, ENOSPC,
// EINTR, short transfers, SIGKILL) at any step.
//
// The raw wrappers behave exactly like the POSIX calls they are named after
// (return -1 and set errno on failure) and do NOT retry on EINTR; the helpers
// below them (write_all, read_bounded, ...) retry EINTR and short transfers.
//
// Thread-safety: every function is thread-safe (they hold no state beyond the
// fault seam's counters).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace kcache::util::io {

int openat(int dirfd, const char* path, int flags, mode_t mode = 0) noexcept;
ssize_t read(int fd, void* buf, std::size_t size) noexcept;
ssize_t write(int fd, const void* buf, std::size_t size) noexcept;
int fsync(int fd) noexcept;
int renameat(int old_dirfd, const char* old_path, int new_dirfd, const char* new_path) noexcept;
int unlinkat(int dirfd, const char* path, int flags) noexcept;
int mkdirat(int dirfd, const char* path, mode_t mode) noexcept;
int fstat(int fd, struct stat* st) noexcept;
int fstatat(int dirfd, const char* path, struct stat* st, int flags) noexcept;
int fchmod(int fd, mode_t mode) noexcept;
int futimens(int fd, const struct timespec times[2]) noexcept;
int flock(int fd, int operation) noexcept;
int ftruncate(int fd, off_t length) noexcept;
int linkat(int old_dirfd, const char* old_path, int new_dirfd, const char* new_path,
           int flags) noexcept;

// Writes all of `data`, retrying EINTR and short writes. Returns 0 or an errno.
int write_all(int fd, std::string_view data) noexcept;

// Reads until end of file, retrying EINTR and short reads, into `out`
// (replacing it). Reads at most `max_size + 1` bytes so a caller can tell
// "larger than max_size" from "exactly max_size". `size_hint` sizes the first
// allocation. Returns 0 or an errno.
int read_bounded(int fd, std::size_t max_size, std::string& out, std::size_t size_hint = 0);

// The whole content of `path` when it is a regular file of at most
// `max_size` bytes (opened with O_RDONLY | O_CLOEXEC | O_NONBLOCK | `open_flags`,
// e.g. O_NOFOLLOW: a FIFO is refused, never waited on); nullopt when it cannot
// be opened or read, is no regular file, or is larger.
std::optional<std::string> read_small_file(const std::string& path, std::size_t max_size, int open_flags = 0);

// read_small_file() into `out` (replaced; its allocation is kept, so a
// caller reading many files reuses one buffer). Returns whether it was read;
// `out` is unspecified when not.
bool read_small_file_into(const std::string& path, std::size_t max_size, std::string& out, int open_flags = 0);

// flock() retried on EINTR. Returns 0 or an errno (EWOULDBLOCK with LOCK_NB).
int lock(int fd, int operation) noexcept;

// Calls `fn(name, d_type)` for every entry of the directory `dir_fd` except
// "." and ".." (`name` views the entry's NUL-terminated name). The directory
// is read through a new open of "." under `dir_fd`, so `dir_fd`'s own offset
// is untouched and it can be read again. Returns 0 or an errno.
int for_each_dir_entry(int dir_fd, const std::function<void(std::string_view, unsigned char)>& fn);

}  // namespace kcache::util::io
