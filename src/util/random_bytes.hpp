// util/random_bytes.hpp: bytes from the kernel's random source, for keys.
#pragma once

#include "kcache/error.hpp"

#include <cstddef>
#include <string_view>

namespace kcache::util {

// Fills `size` bytes at `data` from getrandom(2), retrying on EINTR and
// short reads. Returns the errno-based error naming `what` ("a new team key")
// when the kernel refuses.
// Thread-safety: thread-safe.
Result<void> random_bytes(void* data, std::size_t size, std::string_view what);

} // namespace kcache::util
