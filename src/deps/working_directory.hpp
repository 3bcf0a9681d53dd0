// deps/working_directory.hpp: where NVRTC's output names the working directory (private).
//
// NVRTC 13 writes the working directory into some outputs (measured, see
// docs/keys.md "What NVRTC writes into its output"):
//
//   - every LTO-IR (`ltoir` target), with or without debug options;
//   - every output compiled with --device-debug (-G): DWARF DW_AT_comp_dir;
//   - with --generate-line-info (-lineinfo): the `.file` table holds absolute
//     paths, so a relative program name, in-memory header name, --include-path
//     or --pre-include is joined to the working directory.
//
// Release PTX and cubin never name it. The directory NVRTC uses is LLVM's
// current_path(): $PWD verbatim when it is absolute and names the same
// directory (device and inode) as ".", else getcwd(). So `cd` through a
// symbolic link, or a trailing slash in $PWD, gives other bytes.
//
// Thread-safety: pure functions; nvrtc_working_directory() reads the process's
// environment and working directory at the time of the call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kcache/compile_options.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// Why NVRTC's output for `request` (canonical options `options`) names the
// working directory: "ltoir", "--device-debug", "--generate-line-info with the
// relative path '<p>'". Empty when it does not.
std::string working_directory_embedded_because(const CompileRequest& request, const CanonicalOptions& options);

// The working directory as NVRTC sees it ($PWD or getcwd(), as above).
// Returns io when getcwd() fails (the directory was removed, say).
Result<std::string> nvrtc_working_directory();

// The physical working directory (getcwd(), any length). Returns io when it
// cannot be read (removed under the process, say).
Result<std::string> physical_working_directory();

// physical_working_directory(), against which relative header names
// resolve; empty when it cannot be read.
std::string current_directory();

}  // namespace kcache::jit
