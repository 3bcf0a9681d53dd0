// interpose/real_library.hpp: the real NVRTC / nvJitLink / NVVM behind the stand-in.
//
// The stand-in (libkcache-interpose.so, docs/run.md) exports the C API of the
// JIT libraries. Each exported function forwards to the library the program
// would have used without kcache, found in this order:
//
//   1. the handle the program's own dlopen returned for that library (the
//      stand-in's dlopen records it, dlopen_shim.cpp), so a library loaded by
//      absolute path (cuda-pathfinder, Numba) is the one that runs;
//   2. the next definition after the stand-in in the global scope
//      (dlsym(RTLD_NEXT)): a program linked with -lnvrtc;
//   3. the library kcache's toolkit discovery finds (kcache/toolkit.hpp),
//      loaded on first use: a program that looked the symbol up with
//      dlsym(RTLD_DEFAULT) before loading anything.
//
// Once a library has been chosen it stays chosen for the process.
//
// Thread-safety: every function here is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kcache::interpose {

// The libraries the stand-in presents.
enum class Jit { nvrtc = 0, nvjitlink = 1, nvvm = 2 };
inline constexpr int k_jit_count = 3;

// "nvrtc", "nvjitlink", "nvvm".
std::string_view to_string(Jit jit) noexcept;

// Which JIT library a file named to dlopen is, judged by its file name:
// libnvrtc.so*, libnvrtc.alt.so*, libnvJitLink.so*, libnvvm.so* (not
// libnvrtc-builtins);
// std::nullopt for anything else.
std::optional<Jit> classify_library_file(std::string_view path) noexcept;

// Records `handle`, returned by the real dlopen for a file of `jit`, as the
// library to forward to (the first one recorded wins).
void note_program_handle(Jit jit, void* handle) noexcept;

// The real function `name` of `jit` (see the order above), or nullptr when no
// real library can be found or it lacks the function. Cached per call site by
// the callers; cheap after the first call.
void* real_symbol(Jit jit, const char* name) noexcept;

// real_symbol as a function pointer of type `Fn`, or nullptr. Not cached:
// callers keep it (real_of caches it).
template <class Fn>
Fn real_function(Jit jit, const char* name) noexcept {
  return reinterpret_cast<Fn>(real_symbol(jit, name));  // POSIX: data to function pointer
}

// The real function behind the stand-in's exported function `Self`: the one
// of `jit` named `name` (Self's own name), of Self's type. Resolved on the
// first call, once per process (a library once chosen stays chosen); nullptr
// when there is none. Thread-safe.
template <auto Self>
decltype(Self) real_of(Jit jit, const char* name) noexcept {
  static const auto fn = real_function<decltype(Self)>(jit, name);
  return fn;
}

// real_of for the exported function `fn`, whose name is spelled once.
#define KCACHE_REAL_OF(jit, fn) ::kcache::interpose::real_of<&::fn>(jit, #fn)

// `fn(args...)`, or `missing` when `fn` is null (no real library).
template <class Fn, class R, class... Args>
R call_real(Fn fn, R missing, Args... args) {
  return fn != nullptr ? fn(args...) : missing;
}

// "<major>.<minor>" as the real library's version function `fn` reports it
// (`fn(&major, &minor)`, 0 on success, as nvrtcVersion and nvJitLinkVersion
// do); empty when `fn` is null or fails.
template <class R, class Int>
std::string major_minor_version(R (*fn)(Int*, Int*)) {
  Int major = 0, minor = 0;
  if (fn == nullptr || fn(&major, &minor) != 0) {
    return std::string();
  }
  return std::to_string(major) + "." + std::to_string(minor);
}

// What identifies the real library that runs: its file, GNU build-id (read
// from the loaded image) and the path. Empty members when unknown.
struct RealIdentity {
  std::string path;
  std::string build_id;
};
RealIdentity real_identity(Jit jit);

// A dlopen handle of the stand-in itself (what dlopen returns to a program
// that asked for a JIT library), or nullptr when it cannot be had.
void* self_handle() noexcept;

// True when `address` lies in the stand-in's own image (kcache's code
// calling dlopen must reach the real library, not the stand-in).
bool inside_self(const void* address) noexcept;

// The real dlopen of the C library.
void* real_dlopen(const char* file, int mode) noexcept;

}  // namespace kcache::interpose
