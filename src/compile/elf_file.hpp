// compile/elf_file.hpp: the little ELF reading kcache needs (private).
//
// - the GNU build-id of a shared library, read from its PT_NOTE segments with
//   pread (no mmap, no dlopen), to identify a toolkit library cheaply;
// - the header of a cubin: ELF64, e_machine 190 (EM_CUDA), SM in e_flags.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::jit {

inline constexpr std::uint16_t k_em_cuda = 190;

// Returns the lowercase hex build-id of the ELF file at `path`, std::nullopt
// when it has none, or io/corrupt when it cannot be read as ELF64.
Result<std::optional<std::string>> read_build_id(const std::filesystem::path& path);

// The header fields of a cubin that kcache checks.
struct CubinHeader {
  std::uint16_t machine = 0;
  std::uint32_t flags = 0;
  unsigned sm = 0;  // e_flags bits 8-15
};

// Parses the ELF header of `bytes`; corrupt when it is not ELF64 little-endian.
Result<CubinHeader> read_cubin_header(std::string_view bytes);

// The SM number of an arch name: "sm_90a" -> 90, "compute_100f" -> 100; 0 if none.
unsigned arch_number(std::string_view arch) noexcept;

}  // namespace kcache::jit
