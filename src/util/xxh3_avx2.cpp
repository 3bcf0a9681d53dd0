// XXH3 compiled for AVX2 (see util/xxh3_simd.hpp and src/util/CMakeLists.txt).
// Includes nothing but xxhash.h (static functions with XXH_INLINE_ALL).
#include "util/xxh3_simd.hpp"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL 1
#endif
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on their own
// _mm512_undefined_epi32() (GCC bug 105593) where they are inlined, in the
// functions below; this file holds nothing else.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xxhash.h>

namespace kcache::util::simd {

std::uint64_t xxh3_64_avx2(const void* data, std::size_t size) noexcept {
  return XXH3_64bits(data, size);
}

void xxh3_update_avx2(void* state, const void* data, std::size_t size) noexcept {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

}  // namespace kcache::util::simd
