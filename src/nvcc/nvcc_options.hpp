// nvcc/nvcc_options.hpp: the options nvcc 13 accepts, and what each means to
// the cache (private).
//
// One table (nvcc_options.cpp) lists every option of `nvcc --help` (CUDA 13.0)
// by its long name (`--gpu-architecture`) and short name (`-arch`), whether
// it takes a value, and its role: keyed (it can change what nvcc writes, so
// it goes into the key in one canonical spelling), the compile phase, the
// output, dependency-file options, or a reason the command is not cacheable
// (linking, preprocessing to stdout, files kcache does not know of ...).
//
// Spellings nvcc accepts (measured on nvcc 13.0 with --dryrun):
//   --long-name value   --long-name=value   -short value   -short=value
//   -long-name (one dash, the long name) for every option
//   -Ivalue -Dvalue -Uvalue -Lvalue -lvalue -Ovalue -tvalue (a value joined
//     to these one-letter names only: `-ox.o`, `-xcu`, `-MFx.d`, `-isystem/x`
//     and `-g3` are rejected by nvcc)
// A flag given `=value` (`-lineinfo=true`) is rejected by nvcc; boolean
// options such as `-rdc` take {true|false} as a value.
//
// Thread-safety: the table is immutable.
#pragma once

#include <string_view>

namespace kcache::nvcc {

// Whether an option takes a value.
enum class OptionValue {
  none,  // a flag
  one,   // exactly one value (which may begin with '-': `-O --dryrun` takes "--dryrun")
};

// What an option is to the cache.
enum class OptionRole {
  keyed,           // may change the output: in the key, canonically spelled
  phase,           // selects what is produced (-c, -ptx, -cubin ...): keyed too
  output,          // -o FILE
  dep_full,        // -MD: a dependency file beside the compile, every header
  dep_nonsystem,   // -MMD: the same without system headers
  dep_file,        // -MF FILE
  dep_target,      // -MT NAME
  dep_phony,       // -MP
  host_compiler,   // -ccbin: its identity is keyed, not its spelling
  options_file,    // -optf FILE: replaced by the file's options
  host_options,    // -Xcompiler: keyed, and each host option is checked
  debug_paths,     // -g, -G, -lineinfo, -src-in-ptx: keyed; the output names paths
  uncacheable,     // the command is run by nvcc unchanged; `reason` says why
  forward_unknown, // --forward-unknown-to-host-*: keyed; an unknown option after it is forwarded
};

struct NvccOption {
  std::string_view long_name;   // without dashes: "gpu-architecture"
  std::string_view short_name;  // without the dash: "arch"; empty when none
  OptionValue value;
  OptionRole role;
  std::string_view reason;      // for OptionRole::uncacheable: why, in a few words
};

// The option named `name` (without leading dashes), matched against long
// names when `double_dash`, else against short names and then long names;
// null when nvcc has no such option.
const NvccOption* find_option(std::string_view name, bool double_dash) noexcept;

// True for the one-letter options nvcc lets a value be joined to (`-Iinc`).
bool takes_joined_value(char letter) noexcept;

}  // namespace kcache::nvcc
