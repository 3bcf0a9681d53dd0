// kcache/compile_options.hpp: compiler options in one canonical spelling.
//
// Equivalent spellings of one option give one canonical form, so they give
// one key: for NVRTC `-arch=sm_90`, `-arch` `sm_90` (two arguments),
// `--gpu-architecture` `sm_90` and `--gpu-architecture=sm_90` all become
// `--gpu-architecture=sm_90`; `-DX=1`, `-D X=1`, `-D=X=1` become
// `--define-macro=X=1`. Only spellings the real library accepts as equal are
// made one: a spelling it refuses (NVRTC: `-w -G`, `-Gx`, `-arch sm_90` as
// one argument) is never rewritten into one it accepts. NVRTC's are kept
// verbatim (NVRTC refuses them when compiling); nvJitLink's and libNVVM's
// are refused here.
//
// Order (docs/keys.md): options whose relative order can change the output
// (-D/-U, -I, -include, and anything kcache does not know) keep their order
// and come last; the other known options are stably sorted by name first (so
// a repeated option keeps its relative order).
//
// Options with side effects outside the output (writing a precompiled header,
// timing or trace files, reading a PCH kcache cannot see) are refused with
// `unsupported`, naming the option.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"

namespace kcache {

// The result of canonicalising a backend's options.
struct CanonicalOptions {
  std::vector<std::string> options;       // canonical spelling, canonical order; these go in the key
  std::string arch;                       // the target arch named by the options ("sm_90", "compute_90"), or ""
  std::vector<std::string> include_dirs;  // --include-path values, in order (nvrtc)
  std::vector<std::string> pre_includes;  // --pre-include values, in order (nvrtc)
  bool no_source_include = false;         // --no-source-include given (nvrtc)
};

// Canonicalises NVRTC options. Returns invalid_argument for an option that
// needs a value and has none, and unsupported for options with side effects.
// Unknown options are kept verbatim (in order); NVRTC itself rejects them.
Result<CanonicalOptions> canonicalize_nvrtc_options(const std::vector<std::string>& options);

// Checks nvJitLink options (kept as given, in order). Returns invalid_argument,
// naming the option, for a value not joined by '=' (`-arch sm_90`, or
// `-arch` `sm_90`), which nvJitLink refuses.
Result<CanonicalOptions> canonicalize_nvjitlink_options(const std::vector<std::string>& options);

// Checks libNVVM options, as canonicalize_nvjitlink_options() (libNVVM refuses the same spellings).
Result<CanonicalOptions> canonicalize_nvvm_options(const std::vector<std::string>& options);

}  // namespace kcache
