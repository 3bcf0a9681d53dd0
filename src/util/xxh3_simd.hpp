// util/xxh3_simd.hpp: XXH3-64 built for AVX2 and for AVX-512 (private to util/sha256.cpp).
//
// xxHash picks its vector code when it is compiled; kcache is compiled for
// baseline x86-64 (SSE2), where XXH3 runs at about half the speed AVX2 gives
// and a quarter of AVX-512's. These translation units are compiled with
// -mavx2 and -mavx512f and include nothing but xxhash.h, so no inline function
// built for a wider CPU can be shared with the rest of the program; sha256.cpp
// calls them only when glibc says the CPU has the instructions. The digests are
// identical whichever code computes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kcache::util::simd {

std::uint64_t xxh3_64_avx2(const void* data, std::size_t size) noexcept;
// `state` is an XXH3_state_t reset by the baseline code (the layout is the same).
void xxh3_update_avx2(void* state, const void* data, std::size_t size) noexcept;

std::uint64_t xxh3_64_avx512(const void* data, std::size_t size) noexcept;
void xxh3_update_avx512(void* state, const void* data, std::size_t size) noexcept;

}  // namespace kcache::util::simd
