// util/uninit_string.hpp: fill a std::string without zero-filling it first.
//
// std::string::resize() writes every new byte before the caller overwrites
// it; for a payload read from a file that is a second pass over the bytes (as
// costly as the read itself for a cached 4 MiB file). C++23's
// resize_and_overwrite() skips it; this is that call for C++20 code (its one
// translation unit is compiled as C++23, docs/history/performance-store.md).
//
// Thread-safety: a free function over the caller's string.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

namespace kcache::util {

// Writes into `s` with `fill`, without initialising the bytes first.
// `fill(data, size)` writes up to `size` bytes at `data` and returns how many
// it wrote (at most `size`); `s` ends holding exactly those bytes. `fill` must
// not throw. Allocation failure behaves as std::string::reserve.
template <typename Fill>
void overwrite_string(std::string& s, std::size_t size, Fill&& fill);

// The non-template worker behind overwrite_string.
void overwrite_string_impl(std::string& s, std::size_t size, std::size_t (*fill)(char*, std::size_t, void*),
                           void* context);

template <typename Fill>
void overwrite_string(std::string& s, std::size_t size, Fill&& fill) {
  overwrite_string_impl(
      s, size, [](char* data, std::size_t n, void* ctx) -> std::size_t { return (*static_cast<std::remove_reference_t<Fill>*>(ctx))(data, n);
      },
      static_cast<void*>(&fill));
}

}  // namespace kcache::util
