#include "util/wire_codec.hpp"

#include <unistd.h>

#include <cerrno>

namespace kcache::wire {

std::uint64_t load_le(const char* p, std::size_t n) noexcept {
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  }
  return acc;
}

int write_all_errno(int fd, std::string_view bytes) noexcept {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

Result<void> write_all(int fd, std::string_view bytes) {
  if (const int e = write_all_errno(fd, bytes); e != 0) {
    return make_errno_error(e, "write");
  }
  return {};
}

Result<std::size_t> read_full(int fd, char* out, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return make_errno_error(errno, "read");
    }
    if (n == 0) {
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace kcache::wire
