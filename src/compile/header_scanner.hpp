// compile/header_scanner.hpp: finds the headers a CUDA C++ compile can read from disk (private).
//
// NVRTC cannot report dependencies (NVRTC 13 rejects -M, -MD, -MF and
// --dependency-output), so kcache finds them itself: it scans the source and
// every header it reaches for `#include`, `#include_next`, `#import` and
// `__has_include` directives (compile/directive_scanner.hpp: every
// conditional branch taken), and resolves each name the way NVRTC does:
// in-memory headers first (they win over files), then the includer's
// directory, then each --include-path. Every file that exists on ANY candidate
// path is taken (not only the first), so the result is a superset of what the
// compile reads even where kcache's idea of the search order were wrong.
// Files under the toolkit root are not scanned: the toolkit fingerprint covers them.
//
// A per-process memo keeps (path -> stat identity, SHA-256, directives), so a
// header is re-read and re-hashed only when its stat changed.
//
// Thread-safety: scan() is thread-safe (the memo is locked).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "compile/directive_scanner.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

struct ScanInput {
  std::string_view source;
  std::string program_name;
  std::string source_path;
  const std::vector<NamedBytes>* memory_headers = nullptr;
  std::vector<std::string> include_dirs;
  std::vector<std::string> pre_includes;
  std::filesystem::path toolkit_root;  // canonical; empty when unknown
};

struct ScanResult {
  std::vector<HeaderDependency> headers;  // sorted by path, unique
  std::string not_cacheable;              // non-empty: a directive kcache cannot resolve (where and why)
};

// Scans as described above. Fails only with io when a file that exists cannot be read.
Result<ScanResult> scan_headers(const ScanInput& input);

}  // namespace kcache::jit
