// XXH3 compiled for AVX2 (-mavx2, see src/util/CMakeLists.txt): xxh3_64_avx2, xxh3_update_avx2.
#define KCACHE_XXH3_VARIANT(name) name##avx2
#include "util/xxh3_variant.inc"
