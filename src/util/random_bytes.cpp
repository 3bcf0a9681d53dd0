// random_bytes: getrandom(2) until the buffer is full.
#include "util/random_bytes.hpp"

#include <cerrno>
#include <string>
#include <sys/random.h>

namespace kcache::util {

Result<void> random_bytes(void* data, std::size_t size, std::string_view what) {
  auto* out = static_cast<unsigned char*>(data);
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::getrandom(out + got, size - got, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return make_errno_error(errno, "getrandom for " + std::string(what));
    }
    got += static_cast<std::size_t>(n);
  }
  return {};
}

} // namespace kcache::util
