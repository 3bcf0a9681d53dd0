// XXH3 compiled for AVX-512 (-mavx512f, see src/util/CMakeLists.txt): xxh3_64_avx512, xxh3_update_avx512.
#define KCACHE_XXH3_VARIANT(name) name##avx512
#include "util/xxh3_variant.inc"
