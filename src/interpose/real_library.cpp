#include "interpose/real_library.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "kcache/toolkit.hpp"
#include "util/hex.hpp"

namespace kcache::interpose {

namespace {

// Where each library's functions come from once chosen.
enum class Source : int { none = 0, program_handle, next_in_scope, discovered };

struct LibraryState {
  std::atomic<void*> program_handle{nullptr};
  std::atomic<void*> chosen{nullptr};  // the handle to dlsym on (RTLD_NEXT counts as a handle)
  std::once_flag discovered_once;
  void* discovered = nullptr;
};

std::array<LibraryState, k_jit_count>& states() {
  static std::array<LibraryState, k_jit_count> s;
  return s;
}

// A function each library certainly exports, to test a candidate with.
const char* probe_symbol(Jit jit) {
  switch (jit) {
    case Jit::nvrtc:
      return "nvrtcVersion";
    case Jit::nvjitlink:
      return "nvJitLinkVersion";
    case Jit::nvvm:
      return "nvvmVersion";
  }
  return "";
}

ToolkitLibrary toolkit_library(Jit jit) {
  switch (jit) {
    case Jit::nvrtc:
      return ToolkitLibrary::nvrtc;
    case Jit::nvjitlink:
      return ToolkitLibrary::nvjitlink;
    case Jit::nvvm:
      return ToolkitLibrary::nvvm;
  }
  return ToolkitLibrary::nvrtc;
}

// Chooses where `jit`'s functions come from (see the header for the order).
void* choose(Jit jit) {
  auto& s = states()[static_cast<int>(jit)];
  if (void* c = s.chosen.load(std::memory_order_acquire); c != nullptr) {
    return c;
  }
  void* candidate = s.program_handle.load(std::memory_order_acquire);
  if (candidate == nullptr) {
    // dlsym(RTLD_NEXT) looks after the object that calls it: this file is in the stand-in.
    if (::dlsym(RTLD_NEXT, probe_symbol(jit)) != nullptr) {
      candidate = RTLD_NEXT;
    }
  }
  if (candidate == nullptr) {
    std::call_once(s.discovered_once, [&] {
      if (auto path = Toolkit::instance().library_path(toolkit_library(jit))) {
        s.discovered = real_dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
      }
    });
    candidate = s.discovered;
  }
  if (candidate == nullptr) {
    return nullptr;
  }
  void* expected = nullptr;
  if (!s.chosen.compare_exchange_strong(expected, candidate, std::memory_order_acq_rel)) {
    return expected;
  }
  return candidate;
}

// Reads the NT_GNU_BUILD_ID note of the loaded object named `file`.
struct BuildIdSearch {
  const char* file;
  std::string hex;
};

int find_build_id(dl_phdr_info* info, std::size_t, void* data) {
  auto* search = static_cast<BuildIdSearch*>(data);
  if (info->dlpi_name == nullptr || std::strcmp(info->dlpi_name, search->file) != 0) {
    return 0;
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) {
      continue;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const auto* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const auto* name = p + sizeof note;
      const auto* desc = name + ((note.n_namesz + 3) & ~3U);
      if (desc + note.n_descsz > end) {
        break;
      }
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        search->hex = util::to_hex(desc, note.n_descsz);
        return 1;
      }
      p = desc + ((note.n_descsz + 3) & ~3U);
    }
  }
  return 1;
}

}  // namespace

std::string_view to_string(Jit jit) noexcept {
  switch (jit) {
    case Jit::nvrtc:
      return "nvrtc";
    case Jit::nvjitlink:
      return "nvjitlink";
    case Jit::nvvm:
      return "nvvm";
  }
  return "?";
}

std::optional<Jit> classify_library_file(std::string_view path) noexcept {
  const auto slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const auto is = [&](std::string_view stem) {
    if (name.substr(0, stem.size()) != stem) {
      return false;
    }
    const auto rest = name.substr(stem.size());
    return rest.substr(0, 3) == ".so" || rest.substr(0, 7) == ".alt.so";  // libnvrtc.alt.so: NVRTC's other build
  };
  if (is("libnvrtc")) {
    return Jit::nvrtc;
  }
  if (is("libnvJitLink")) {
    return Jit::nvjitlink;
  }
  if (is("libnvvm")) {
    return Jit::nvvm;
  }
  return std::nullopt;
}

void note_program_handle(Jit jit, void* handle) noexcept {
  void* expected = nullptr;
  states()[static_cast<int>(jit)].program_handle.compare_exchange_strong(expected, handle);
}

void* real_symbol(Jit jit, const char* name) noexcept {
  void* from = choose(jit);
  if (from == nullptr) {
    return nullptr;
  }
  return ::dlsym(from, name);
}

RealIdentity real_identity(Jit jit) {
  RealIdentity id;
  void* fn = real_symbol(jit, probe_symbol(jit));
  Dl_info info{};
  if (fn == nullptr || ::dladdr(fn, &info) == 0 || info.dli_fname == nullptr) {
    return id;
  }
  id.path = info.dli_fname;
  BuildIdSearch search{info.dli_fname, {}};
  ::dl_iterate_phdr(find_build_id, &search);
  id.build_id = std::move(search.hex);
  return id;
}

void* real_dlopen(const char* file, int mode) noexcept {
  using Fn = void* (*)(const char*, int);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "dlopen"));  // POSIX: data to function pointer
  return real != nullptr ? real(file, mode) : nullptr;
}

namespace {

Dl_info& self_info() {
  static Dl_info info = [] {
    Dl_info i{};
    ::dladdr(reinterpret_cast<const void*>(&self_handle), &i);
    return i;
  }();
  return info;
}

}  // namespace

void* self_handle() noexcept {
  // A new reference each time, so that the program's dlclose of it balances.
  const Dl_info& info = self_info();
  return info.dli_fname == nullptr ? nullptr : real_dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

bool inside_self(const void* address) noexcept {
  Dl_info info{};
  return ::dladdr(address, &info) != 0 && info.dli_fbase == self_info().dli_fbase;
}

}  // namespace kcache::interpose
