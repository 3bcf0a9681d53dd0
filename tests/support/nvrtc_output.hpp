// tests/support/nvrtc_output.hpp: compare NVRTC outputs modulo what NVRTC does not reproduce.
//
// NVRTC 13 names internal-linkage entities (anonymous namespaces, internal
// libcu++ objects such as cuda::std's CPOs) with a module id. When the
// translation unit defines no non-template external entity to take the id
// from (CUB kernels, any kernel that is only a template instantiation), the id
// ends in a hash of the working directory and of the modification time of the
// file named by the program name (the current time when there is none), and
// the compiling process's id:
//
//   _INTERNAL_00000000_12_heavy_cub_cu_d7298206_18551   (hash d7298206, pid 18551)
//
// so two fresh compiles of the same input in two processes differ
// (docs/keys.md, "Output NVRTC does not reproduce"). These helpers mask
// exactly that part and nothing else, so a stale hit (another directory's
// line table or debug info, another source) still compares different.
//
// Thread-safety: pure functions, except comparable_output for ltoir, which
// links with nvJitLink (thread-safe in kcache).
#pragma once

#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::test {

// Replaces, in any bytes (PTX text, ELF string tables), the hash and process
// id of every module id after `_INTERNAL_` / `_GLOBAL__N__` with "H_P", and the
// decimal length in front of those markers with "#" (the length changes with
// the number of digits of the process id). Other bytes are copied.
std::string mask_module_ids(std::string_view bytes);

// A canonical text of a cubin (ELF64): header fields, program headers without
// file offsets, and per section its masked name, attributes and masked
// content; symbol tables by masked name; string tables only through the names
// that refer to them. Two cubins that differ only in module ids (even of other
// lengths) give one text. Returns corrupt when `cubin` is not ELF64.
Result<std::string> canonical_cubin(std::string_view cubin);

// What two outputs of kind "ptx", "cubin" or "ltoir" are compared by:
// ptx -> mask_module_ids; cubin -> canonical_cubin; ltoir (an opaque container
// NVRTC rewrites as a whole) -> linked to PTX with nvJitLink (-lto, `arch`),
// then mask_module_ids. For LTO-IR this catches other code, line tables and
// debug info, but not the working directory a release LTO-IR carries; compare
// deterministic LTO-IR byte for byte.
Result<std::string> comparable_output(std::string_view kind, const std::string& bytes,
                                      const std::string& arch = "sm_90");

}  // namespace kcache::test
