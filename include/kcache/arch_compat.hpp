// kcache/arch_compat.hpp: can this artifact run on that device? Checked from
// the passport and the payload alone, before any driver call (docs/loading.md).
//
// Rules (CUDA's compatibility model, stricter for SASS):
// - cubin for sm_XY, sm_XYa or sm_XYf runs only on a device of compute
//   capability exactly X.Y (the driver would accept X.Z with Z >= Y; kcache
//   serves each SM its own binary);
// - PTX for compute_XY (`.target sm_XY`) is JIT-compiled by the driver for any
//   device of capability >= X.Y, provided the driver understands its PTX ISA
//   version (`.version A.B`); PTX for an `a` target runs only on exactly X.Y,
//   for an `f` target on X.Z with Z >= Y;
// - LTO-IR is not loadable: link it to a cubin first (nvJitLink);
// - fatbin: the driver picks an image; kcache checks only passport and digest.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"

namespace kcache {

// An arch name taken apart: "sm_90a" -> {90, 'a', false}; "compute_75" -> {75, 0, true}.
struct ArchName {
  unsigned number = 0;   // major * 10 + minor (100 for sm_100)
  char suffix = 0;       // 0, 'a' (arch-specific) or 'f' (family)
  bool is_virtual = false;  // compute_XY
  unsigned major() const noexcept { return number / 10; }
  unsigned minor() const noexcept { return number % 10; }
  std::string text() const;  // "sm_90a", "compute_75"
  friend bool operator==(const ArchName&, const ArchName&) = default;
};

// Parses "sm_XY[a|f]" or "compute_XY[a|f]" (XY two or three digits).
// invalid_argument otherwise.
Result<ArchName> parse_arch(std::string_view text);

// What a device offers.
struct DeviceInfo {
  int ordinal = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int driver_version = 0;  // cuDriverGetVersion: 13000 for CUDA 13.0
  std::string name;
};

// What kcache reads from a cubin's ELF header and notes.
struct CubinInfo {
  unsigned sm = 0;     // e_flags bits 8-15
  char suffix = 0;     // from the `-arch sm_XYs` recorded in .note.nv.tkinfo, 0 when plain or absent
  bool has_tool_note = false;
};

// Checks that `bytes` is an ELF64 little-endian CUDA object (e_machine 190)
// with sane section headers, and reads its SM and arch suffix. corrupt otherwise.
Result<CubinInfo> inspect_cubin(std::string_view bytes);

// What kcache reads from PTX text: `.version A.B` and `.target sm_XY[a|f]`.
struct PtxInfo {
  unsigned isa_major = 0;
  unsigned isa_minor = 0;
  ArchName target;
};
// corrupt when either directive is missing or malformed.
Result<PtxInfo> inspect_ptx(std::string_view text);

// The newest PTX ISA the driver of `driver_version` can JIT (13000 -> 9.0,
// 12080 -> 8.7 ...). Drivers newer than kcache's table get the newest entry.
std::pair<unsigned, unsigned> max_ptx_isa(int driver_version) noexcept;

// Every check load() makes before calling the driver, in order: the artifact
// verifies (format, kind, size, SHA-256: corrupt); its kind is loadable
// (ltoir and others: unsupported); its payload agrees with its kind and with
// the passport's target arch (corrupt); and it can run on `device`
// (unsupported, naming both arches).
Result<void> check_loadable(const Artifact& artifact, const DeviceInfo& device);

}  // namespace kcache
