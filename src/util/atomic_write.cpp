#include "util/atomic_write.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "util/fd.hpp"
#include "util/unique_name.hpp"
#include "util/wire_codec.hpp"

namespace kcache::util {

namespace {

// The writer of `bytes` for write_in_place / write_file_atomically_with.
std::function<Result<void>(int fd)> bytes_writer(const std::filesystem::path& path, std::string_view bytes) {
  return [&path, bytes](int fd) -> Result<void> {
    if (const int e = wire::write_all_errno(fd, bytes); e != 0) {
      return make_errno_error(e, "cannot write " + path.string());
    }
    return {};
  };
}

}  // namespace

Result<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes, mode_t mode,
                                   FileSync sync) {
  return write_file_atomically_with(path, bytes_writer(path, bytes), mode, sync);
}

Result<void> write_file_atomically_with(const std::filesystem::path& path,
                                        const std::function<Result<void>(int fd)>& write, mode_t mode,
                                        FileSync sync) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  // O_EXCL on a fresh name rather than mkstemp: the kernel then applies the
  // umask to `mode`, with no process-wide umask() dance.
  std::string tmpl;
  Fd fd;
  for (int attempt = 0; attempt < 100 && !fd; ++attempt) {
    // Appended piecewise: GCC 12 at -O3 warns (-Wrestrict) on "." + std::string&&.
    std::string name(1, '.');
    name += path.filename().string();
    name += ".kcache-";
    name += temp_suffix();
    tmpl = (dir / name).string();
    fd.reset(::open(tmpl.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
    if (!fd && errno != EEXIST) {
      break;
    }
  }
  if (!fd) {
    return make_errno_error(errno, "cannot create a temporary file beside " + path.string());
  }
  auto fail = [&](int err, std::string_view what) {
    ::unlink(tmpl.c_str());
    return make_errno_error(err, std::string(what) + " " + path.string());
  };
  if (auto written = write(fd.get()); !written) {
    ::unlink(tmpl.c_str());
    return written;
  }
  if (sync == FileSync::fsync && ::fsync(fd.get()) != 0) {
    return fail(errno, "cannot fsync");
  }
  if (::close(fd.release()) != 0) {
    return fail(errno, "cannot close");
  }
  if (sync == FileSync::none) {
    // Replacing an existing file by rename() makes ext4 start writing the new
    // file's data back first (auto_da_alloc), which is most of a cache hit
    // with a large output (0.3-0.6 ms for 150 KiB). Exchanging the two names
    // is just as atomic for readers and does not, and the old file's name is
    // then the temporary one. Where there is nothing to exchange with, or the
    // filesystem cannot exchange, rename() below does the work; only a
    // regular file is exchanged (rename() refuses to replace a directory).
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::renameat2(AT_FDCWD, tmpl.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
      if (::unlink(tmpl.c_str()) == 0 || errno == ENOENT) {
        return {};
      }
      // Not the regular file it was a moment ago: put it back, and let rename() decide.
      ::renameat2(AT_FDCWD, tmpl.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE);
    }
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    return fail(errno, "cannot rename the temporary file to");
  }
  return {};
}

namespace {

// True when `path` is a regular file whose content is exactly `bytes`. The
// file is mapped, not read into a buffer: comparing costs no fresh memory.
bool holds_exactly(const std::filesystem::path& path, std::string_view bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) != bytes.size()) {
    return false;
  }
  if (bytes.empty()) {
    return true;
  }
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) {
    return false;
  }
  const bool same = std::memcmp(map, bytes.data(), bytes.size()) == 0;
  ::munmap(map, bytes.size());
  return same;
}

// Connects to the Unix stream socket at `path` (open() cannot open a socket).
Fd connect_socket(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& p = path.native();
  if (p.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return Fd();
  }
  std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Fd();
  }
  return fd;
}

// Writes through `path` in place: what is there is opened (a symlink
// followed, a missing symlink target created), truncated where that means
// anything (a regular target), and written by `write(fd)`; nothing is renamed
// or replaced.
Result<void> write_in_place(const std::filesystem::path& path, const std::function<Result<void>(int fd)>& write,
                            mode_t mode) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd && errno == ENXIO) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      fd = connect_socket(path);
    } else {
      errno = ENXIO;
    }
  }
  if (!fd) {
    return make_errno_error(errno, "cannot open " + path.string());
  }
  if (auto written = write(fd.get()); !written) {
    return written;
  }
  if (::close(fd.release()) != 0) {
    return make_errno_error(errno, "cannot write " + path.string());
  }
  return {};
}

// Where an output goes: nullopt for a regular file or a missing path (replace
// it atomically); EISDIR for a directory; 0 for anything else (write in place).
std::optional<int> special_output(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) {
    return std::nullopt;
  }
  return S_ISDIR(st.st_mode) ? EISDIR : 0;
}

}  // namespace

Result<bool> write_output_file(const std::filesystem::path& path, std::string_view bytes, mode_t mode) {
  // Only a regular file (or nothing) is replaced; anything else is written
  // the way a compiler writes it, in place, so /dev/null stays a device,
  // /dev/stdout stays a link and a FIFO's reader gets the bytes.
  if (const auto special = special_output(path)) {
    if (*special != 0) {
      return make_errno_error(*special, "cannot write " + path.string());
    }
    if (auto ok = write_in_place(path, bytes_writer(path, bytes), mode); !ok) {
      return tl::unexpected(ok.error());
    }
    return true;
  }
  if (holds_exactly(path, bytes)) {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0) {
      return false;
    }
    // Cannot touch it (another owner, say): write it anew, which reports why if that fails too.
  }
  if (auto ok = write_file_atomically(path, bytes, mode, FileSync::none); !ok) {
    return tl::unexpected(ok.error());
  }
  return true;
}

Result<void> write_output_file_with(const std::filesystem::path& path,
                                    const std::function<Result<void>(int fd)>& write, mode_t mode, FileSync sync) {
  if (const auto special = special_output(path)) {
    if (*special != 0) {
      return make_errno_error(*special, "cannot write " + path.string());
    }
    return write_in_place(path, write, mode);
  }
  return write_file_atomically_with(path, write, mode, sync);
}

}  // namespace kcache::util
