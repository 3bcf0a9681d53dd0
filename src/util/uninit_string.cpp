// Compiled as C++23 (see src/util/CMakeLists.txt) for basic_string::resize_and_overwrite;
// everything else in kcache is C++20 and calls it through util/uninit_string.hpp.
#include "util/uninit_string.hpp"

#include <algorithm>

namespace kcache::util {

void overwrite_string_impl(std::string& s, std::size_t size, std::size_t (*fill)(char*, std::size_t, void*),
                           void* context) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  // `size`, not the count the library passes: GCC 12's libstdc++ passes the
  // new capacity there when the string grows geometrically (a 27-byte fill of
  // an empty string is asked for 30 bytes; GCC bug 109703), and a fill that
  // trusts it reads past what it was asked for.
  s.resize_and_overwrite(size, [&](char* data, std::size_t) { return std::min(fill(data, size, context), size); });
#else
  s.resize(size);
  s.resize(fill(s.data(), size, context));
#endif
}

}  // namespace kcache::util
