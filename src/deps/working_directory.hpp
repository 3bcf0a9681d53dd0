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
// A `#line N "name"` with a relative name is joined to the working directory
// the same way under --generate-line-info (`.file 1 "<cwd>/gen/kernel.cu"`),
// whatever the other paths are: relative_line_directive() finds one in a
// file's text (request_keys.cpp keys the directory then; the verdict is
// remembered per key, as base_dir's is).
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
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// Why NVRTC's output for `request` (canonical options `options`) names the
// working directory: "ltoir", "--device-debug", "--generate-line-info with the
// relative path '<p>'". Empty when it does not.
std::string working_directory_embedded_because(const CompileRequest& request, const CanonicalOptions& options);

// The first `#line` directive of `text` (after trigraphs and splices) whose
// file name is relative or not a literal (`#line 1 "gen/k.cu"`, `# 7 "k.cu"`,
// `#line 1 NAME`), as written; empty when none. Lexical and conservative: a
// directive in a comment or under `#if 0` counts too (it only keys the
// working directory).
std::string relative_line_directive(std::string_view text);

// Why a file of this request holds such a directive ("<file>: <directive>"),
// or a disk header changed since the scan (checked against its digest);
// empty when none. Reads the source, the in-memory headers and every disk header.
std::string files_with_relative_line(const CompileRequest& request, const std::vector<HeaderDependency>& headers);

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
