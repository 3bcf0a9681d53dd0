// python/src/shared_bytes.hpp: one Python bytes object per memory-tier buffer.
//
// A hit from the memory tier hands out the buffer the tier holds (no copy in
// C++), but Artifact.payload must be a bytes object, and making one copies the
// payload: 4.3 us of a 16 us CUB hit through kcache.cuda_core.compile (187 KB).
// SharedBytes remembers the bytes object made for a buffer together with a
// share of that buffer (a Payload copy), so the buffer cannot be freed and its
// address reused while it is remembered: a later payload that shares the very
// buffer (Payload::shares_with) gets the same immutable bytes object back.
// Equal bytes in another buffer never match.
//
// Bounded: at most k_max_entries buffers and k_max_bytes of them; when either
// would be exceeded the oldest are forgotten. Payloads under k_min_bytes are
// copied as before (a copy is cheaper than the bookkeeping).
//
// Thread-safety: call only with the GIL held (it serialises every use). The
// remembered objects are never destroyed at exit (the interpreter may be gone
// by then), which is why the one instance is never freed.
#pragma once

#include <cstddef>
#include <deque>

#include <nanobind/nanobind.h>

#include "kcache/payload.hpp"

namespace kcache::python {

class SharedBytes {
 public:
  static constexpr std::size_t k_min_bytes = 16 * 1024;
  static constexpr std::size_t k_max_entries = 64;
  static constexpr std::size_t k_max_bytes = std::size_t{64} << 20;

  static SharedBytes& instance();

  // The bytes object for `payload`'s buffer: remembered, or made (a copy) and
  // remembered. REQUIRES: the GIL.
  nanobind::bytes bytes_of(const Payload& payload);

 private:
  struct Entry {
    Payload buffer;  // a share of the buffer: keeps its address from being reused
    nanobind::object bytes;
  };
  std::deque<Entry> m_entries;  // oldest first
  std::size_t m_bytes = 0;
};

}  // namespace kcache::python
