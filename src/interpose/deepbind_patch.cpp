#include "interpose/deepbind_patch.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string_view>

#include "interpose/real_library.hpp"

namespace kcache::interpose {

namespace {

#if defined(__x86_64__)
constexpr unsigned k_jump_slot = R_X86_64_JUMP_SLOT;
constexpr unsigned k_glob_dat = R_X86_64_GLOB_DAT;
constexpr bool k_supported = true;
#elif defined(__aarch64__)
constexpr unsigned k_jump_slot = R_AARCH64_JUMP_SLOT;
constexpr unsigned k_glob_dat = R_AARCH64_GLOB_DAT;
constexpr bool k_supported = true;
#else
constexpr unsigned k_jump_slot = 0;
constexpr unsigned k_glob_dat = 0;
constexpr bool k_supported = false;
#endif

bool jit_name(std::string_view name) {
  return name.rfind("nvrtc", 0) == 0 || name.rfind("nvJitLink", 0) == 0 || name.rfind("__nvJitLink", 0) == 0 ||
         name.rfind("nvvm", 0) == 0;
}

struct Walk {
  void* self = nullptr;
  std::uintptr_t self_base = 0;
};

// A dynamic-section pointer: glibc relocates them in place, other loaders may not.
std::uintptr_t dyn_ptr(const dl_phdr_info* info, ElfW(Addr) value) {
  const auto v = static_cast<std::uintptr_t>(value);
  return v < info->dlpi_addr ? v + info->dlpi_addr : v;
}

void patch_slot(const dl_phdr_info* info, std::uintptr_t slot, void* target) {
  auto* p = reinterpret_cast<void**>(slot);
  if (*p == target) {
    return;
  }
  bool relro = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_GNU_RELRO && slot >= start && slot < start + ph.p_memsz) {
      relro = true;
    }
  }
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  void* first = reinterpret_cast<void*>(slot & ~(page - 1));
  if (relro && ::mprotect(first, page, PROT_READ | PROT_WRITE) != 0) {
    return;
  }
  __atomic_store_n(p, target, __ATOMIC_RELEASE);
  if (relro) {
    ::mprotect(first, page, PROT_READ);
  }
}

void patch_table(const dl_phdr_info* info, const Walk& walk, const ElfW(Rela) * rela, std::size_t bytes,
                 const ElfW(Sym) * symtab, const char* strtab) {
  for (std::size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
    const unsigned type = ELF64_R_TYPE(rela[i].r_info);
    const unsigned index = ELF64_R_SYM(rela[i].r_info);
    if ((type != k_jump_slot && type != k_glob_dat) || index == 0) {
      continue;
    }
    const char* name = strtab + symtab[index].st_name;
    if (!jit_name(name)) {
      continue;
    }
    void* ours = ::dlsym(walk.self, name);
    if (ours == nullptr) {
      continue;
    }
    patch_slot(info, info->dlpi_addr + rela[i].r_offset, ours);
  }
}

int patch_object(dl_phdr_info* info, std::size_t, void* data) {
  const auto& walk = *static_cast<const Walk*>(data);
  if (info->dlpi_addr == walk.self_base || (info->dlpi_name != nullptr && classify_library_file(info->dlpi_name))) {
    return 0;
  }
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dynamic == nullptr) {
    return 0;
  }
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* jmprel = nullptr;
  const ElfW(Rela)* rela = nullptr;
  std::size_t jmprel_bytes = 0, rela_bytes = 0;
  bool rela_plt = true;
  for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_ptr(info, d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(dyn_ptr(info, d->d_un.d_ptr));
        break;
      case DT_JMPREL:
        jmprel = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(info, d->d_un.d_ptr));
        break;
      case DT_PLTRELSZ:
        jmprel_bytes = d->d_un.d_val;
        break;
      case DT_PLTREL:
        rela_plt = d->d_un.d_val == DT_RELA;
        break;
      case DT_RELA:
        rela = reinterpret_cast<const ElfW(Rela)*>(dyn_ptr(info, d->d_un.d_ptr));
        break;
      case DT_RELASZ:
        rela_bytes = d->d_un.d_val;
        break;
      default:
        break;
    }
  }
  if (symtab == nullptr || strtab == nullptr) {
    return 0;
  }
  if (jmprel != nullptr && rela_plt) {
    patch_table(info, walk, jmprel, jmprel_bytes, symtab, strtab);
  }
  if (rela != nullptr) {
    patch_table(info, walk, rela, rela_bytes, symtab, strtab);
  }
  return 0;
}

}  // namespace

void bind_loaded_objects() noexcept {
  if (!k_supported) {
    return;
  }
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  Walk walk;
  walk.self = self_handle();
  if (walk.self == nullptr) {
    return;
  }
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&bind_loaded_objects), &info) != 0) {
    walk.self_base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  }
  ::dl_iterate_phdr(patch_object, &walk);
  ::dlclose(walk.self);
}

}  // namespace kcache::interpose
