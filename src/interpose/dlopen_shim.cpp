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
//
// The real dlopen searches a bare name (no '/') in the DT_RPATH or DT_RUNPATH
// of the object that calls it, which, through this function, would be the
// stand-in's. So a bare name is first looked up as the caller would have:
// already loaded, else under the caller's own RPATH/RUNPATH ($ORIGIN
// expanded). NVRTC opens libnvrtc-builtins by name beside itself this way,
// and NVIDIA's PyPI wheels (site-packages/nvidia/cu13/lib/) are on no other
// search path (docs/run.md).
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
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

// `file` (a bare name) in the RPATH or RUNPATH of the object at `caller`,
// opened; nullptr (dlerror untouched) when it is in none of them.
void* open_in_caller_path(const char* file, int mode, const void* caller) {
  Dl_info info{};
  struct link_map* map = nullptr;
  if (::dladdr1(caller, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr ||
      map->l_ld == nullptr) {
    return nullptr;
  }
  const char* strtab = nullptr;
  const char* rpath = nullptr;
  const char* runpath = nullptr;
  ElfW(Xword) rpath_at = 0, runpath_at = 0;
  bool has_rpath = false, has_runpath = false;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_STRTAB) {
      strtab = reinterpret_cast<const char*>(d->d_un.d_ptr);  // relocated by the loader
    } else if (d->d_tag == DT_RPATH) {
      rpath_at = d->d_un.d_val;
      has_rpath = true;
    } else if (d->d_tag == DT_RUNPATH) {
      runpath_at = d->d_un.d_val;
      has_runpath = true;
    }
  }
  if (strtab == nullptr || (!has_rpath && !has_runpath)) {
    return nullptr;
  }
  if (reinterpret_cast<ElfW(Addr)>(strtab) < map->l_addr) {
    strtab += map->l_addr;  // a read-only dynamic section keeps the unrelocated address
  }
  rpath = has_rpath ? strtab + rpath_at : nullptr;
  runpath = has_runpath ? strtab + runpath_at : nullptr;
  // The main program's link map has an empty name: its directory is /proc/self/exe's.
  std::string origin = map->l_name != nullptr && map->l_name[0] == '/' ? map->l_name : "";
  if (origin.empty()) {
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    origin.assign(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  origin = origin.substr(0, origin.rfind('/'));
  // As the loader: DT_RPATH only when there is no DT_RUNPATH.
  const std::string_view list = runpath != nullptr ? runpath : rpath;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(':', start), list.size());
    std::string dir(list.substr(start, end - start));
    for (const std::string_view token : {"${ORIGIN}", "$ORIGIN"}) {
      for (std::size_t at = dir.find(token); at != std::string::npos; at = dir.find(token)) {
        dir.replace(at, token.size(), origin);
      }
    }
    if (!dir.empty() && dir.find('$') == std::string::npos) {
      const std::string path = dir + "/" + file;
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        if (void* handle = kcache::interpose::real_dlopen(path.c_str(), mode)) {
          return handle;
        }
      }
    }
    start = end + 1;
  }
  return nullptr;
}

// The real dlopen of `file` as `caller` would have searched for it.
void* open_as(const char* file, int mode, const void* caller) {
  if (file != nullptr && std::strchr(file, '/') == nullptr) {
    if (void* loaded = kcache::interpose::real_dlopen(file, mode | RTLD_NOLOAD)) {
      return loaded;
    }
    (void)::dlerror();  // not loaded yet: no error of ours is left for the program to read
    if (void* found = open_in_caller_path(file, mode, caller)) {
      return found;
    }
  }
  return kcache::interpose::real_dlopen(file, mode);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using namespace kcache::interpose;
  const void* caller = __builtin_return_address(0);
  if (file == nullptr || inside_self(caller)) {
    return real_dlopen(file, mode);
  }
  const auto jit = classify_library_file(file);
  if (!jit || disabled_by_environment()) {
    void* handle = open_as(file, mode, caller);
    if (handle != nullptr && (mode & RTLD_DEEPBIND) != 0 && !disabled_by_environment()) {
      bind_loaded_objects();  // its own lookup scope would reach the real library first
    }
    return handle;
  }
  void* real = open_as(file, mode, caller);
  if (real == nullptr) {
    return nullptr;  // dlerror() holds the real reason
  }
  note_program_handle(*jit, real);
  void* self = self_handle();
  return self != nullptr ? self : real;
}
