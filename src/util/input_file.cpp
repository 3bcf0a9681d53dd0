// Opening a file a user named: stat, then a non-blocking open checked again (input_file.hpp).
#include "util/input_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "util/posix_io.hpp"

namespace kcache::util {

namespace {

// "<what> <path>", or the path alone.
std::string named(const std::filesystem::path& path, std::string_view what) {
  return what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
}

Error failure(int err, const std::filesystem::path& path, std::string_view what) {
  if (err == ENOENT || err == ENOTDIR) {
    return Error{ErrorCode::not_found, named(path, what) + " does not exist", {}};
  }
  if (err == ELOOP) {
    return Error{ErrorCode::io, named(path, what) + " is a loop of symbolic links", {}};
  }
  return make_errno_error(err, "cannot read " + named(path, what)).value();
}

Error not_regular(const std::filesystem::path& path, std::string_view what, mode_t mode) {
  return Error{ErrorCode::io, fmt::format("{} is {}, not a regular file", named(path, what), file_type_words(mode)), {}};
}

}  // namespace

std::string_view file_type_words(mode_t mode) noexcept {
  if (S_ISREG(mode)) {
    return "a regular file";
  }
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  return "a device";
}

Result<void> check_input_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return tl::unexpected(failure(errno, path, what));
  }
  if (!S_ISREG(st.st_mode)) {
    return tl::unexpected(not_regular(path, what, st.st_mode));
  }
  return {};
}

Result<InputFile> open_input_file(const std::filesystem::path& path, std::string_view what) {
  // stat() first: a FIFO, device or socket is refused without being opened
  // (opening some devices has effects of its own).
  if (auto ok = check_input_file(path, what); !ok) {
    return tl::unexpected(ok.error());
  }
  InputFile file;
  file.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!file.fd) {
    return tl::unexpected(failure(errno, path, what));
  }
  if (::fstat(file.fd.get(), &file.st) != 0) {
    return tl::unexpected(failure(errno, path, what));
  }
  if (!S_ISREG(file.st.st_mode)) {  // swapped in since the stat()
    return tl::unexpected(not_regular(path, what, file.st.st_mode));
  }
  // Reads of a regular file never block anyway; clear the flag for whoever
  // hands the descriptor on (mmap, sendfile and read do not care).
  const int flags = ::fcntl(file.fd.get(), F_GETFL);
  if (flags >= 0) {
    (void)::fcntl(file.fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  return file;
}

Result<std::string> read_input_file(const std::filesystem::path& path, std::string_view what,
                                    std::uint64_t max_bytes) {
  auto file = open_input_file(path, what);
  if (!file) {
    return tl::unexpected(file.error());
  }
  const auto too_large = [&] {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} is larger than {} bytes", named(path, what), max_bytes));
  };
  if (static_cast<std::uint64_t>(file->st.st_size) > max_bytes) {
    return too_large();
  }
  std::string bytes;
  if (const int e = io::read_bounded(file->fd.get(), static_cast<std::size_t>(max_bytes), bytes,
                                     static_cast<std::size_t>(file->st.st_size));
      e != 0) {
    return tl::unexpected(failure(e, path, what));
  }
  if (bytes.size() > max_bytes) {
    return too_large();
  }
  return bytes;
}

}  // namespace kcache::util
