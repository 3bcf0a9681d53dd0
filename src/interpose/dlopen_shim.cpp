// interpose/dlopen_shim.cpp: the stand-in's dlopen, which catches the JIT
// libraries however a program opens them (docs/run.md, "How loading is caught").
//
// A program (or a library it loads) that calls dlopen reaches this function
// first, because the stand-in is preloaded. For a file whose name is a JIT
// library (libnvrtc.so*, libnvJitLink.so*, libnvvm.so*; by soname or by any
// path), the real library is opened exactly as asked (same file, same flags,
// RTLD_DEEPBIND included), its handle is recorded as the library to forward
// to (real_library.hpp), and the program gets a handle of the stand-in: dlsym
// on it finds the stand-in's functions. Everything else, and every dlopen
// made by kcache's own code inside the stand-in, goes to the real dlopen
// untouched. A failed dlopen returns nullptr with the real dlerror().
//
// An object opened with RTLD_DEEPBIND has its JIT calls pointed at the
// stand-in afterwards (deepbind_patch.hpp).
//
// KCACHE_DISABLE=1 (or any value kcache reads as true) leaves dlopen alone.
#include <dlfcn.h>

#include <cstdlib>
#include <strings.h>

#include "interpose/deepbind_patch.hpp"
#include "interpose/real_library.hpp"

namespace {

bool disabled_by_environment() {
  const char* v = std::getenv("KCACHE_DISABLE");
  if (v == nullptr) {
    return false;
  }
  for (const char* t : {"1", "true", "yes", "on"}) {  // as the `disable` setting parses it
    if (::strcasecmp(v, t) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using namespace kcache::interpose;
  if (file == nullptr || inside_self(__builtin_return_address(0))) {
    return real_dlopen(file, mode);
  }
  const auto jit = classify_library_file(file);
  if (!jit || disabled_by_environment()) {
    void* handle = real_dlopen(file, mode);
    if (handle != nullptr && (mode & RTLD_DEEPBIND) != 0 && !disabled_by_environment()) {
      bind_loaded_objects();  // its own lookup scope would reach the real library first
    }
    return handle;
  }
  void* real = real_dlopen(file, mode);
  if (real == nullptr) {
    return nullptr;  // dlerror() holds the real reason
  }
  note_program_handle(*jit, real);
  void* self = self_handle();
  return self != nullptr ? self : real;
}
