// util/dl_symbols.hpp: functions of a shared library loaded on first use.
//
// A library that only some runs need (libcurl for HTTP remotes, libssl for
// TLS ones) is opened with dlopen when first used, so a process that never
// needs it does not map it. DlSymbols opens the library once and resolves
// function pointers by name, remembering the first failure as one message.
// The library stays loaded for the life of the process (the pointers taken
// from it are kept in function-local statics).
//
// Thread-safety: use from one thread while loading (callers build their
// function table inside a function-local static initializer).
#pragma once

#include <dlfcn.h>

#include <string>
#include <string_view>
#include <type_traits>

namespace kcache::util {

class DlSymbols {
 public:
  // Opens `soname` (RTLD_NOW | RTLD_LOCAL). On failure error() says so,
  // followed by `purpose` (what it is for and which package provides it).
  DlSymbols(const char* soname, std::string_view purpose) : m_soname(soname) {
    m_lib = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (m_lib == nullptr) {
      const char* why = ::dlerror();
      m_error = "cannot load " + m_soname + " " + std::string(purpose) + ": " + (why != nullptr ? why : "");
    }
  }

  // Sets `fn` to the function `name` of the library; nullptr (and error()
  // names the first missing one) when it is absent or the library is not loaded.
  template <class Fn>
  void resolve(Fn& fn, const char* name) {
    static_assert(std::is_pointer_v<Fn>, "resolve() fills a function pointer");
    fn = m_lib == nullptr ? nullptr : reinterpret_cast<Fn>(::dlsym(m_lib, name));  // POSIX: data to function pointer
    if (fn == nullptr && m_error.empty()) {
      m_error = m_soname + " lacks " + name;
    }
  }

  // Empty while the library and every resolved function were found.
  const std::string& error() const noexcept { return m_error; }

 private:
  std::string m_soname;
  void* m_lib = nullptr;
  std::string m_error;
};

}  // namespace kcache::util
