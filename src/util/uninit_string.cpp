// Compiled as C++23 (see src/util/CMakeLists.txt) for basic_string::resize_and_overwrite;
// everything else in kcache is C++20 and calls it through util/uninit_string.hpp.
#include "util/uninit_string.hpp"

namespace kcache::util {

void overwrite_string_impl(std::string& s, std::size_t size, std::size_t (*fill)(char*, std::size_t, void*),
                           void* context) {
#if defined(__cpp_lib_string_resize_and_overwrite)
  s.resize_and_overwrite(size, [&](char* data, std::size_t n) { return fill(data, n, context); });
#else
  s.resize(size);
  s.resize(fill(s.data(), size, context));
#endif
}

}  // namespace kcache::util
