// deps/dependencies.hpp: the dependency layer's contract: what a compile
// depends on besides the bytes it is given (private).
//
// Given a request's source, options, include paths and toolkit, the layer
// returns the header set (every disk header the compile can read, with its
// SHA-256), its manifest (what must be re-checked for the set to hold again,
// deps/header_manifest.hpp), and what the key needs besides: whether the
// working directory and the program name's directory reach the output, and
// why a request cannot be cached at all. compile/ keys the request from this
// (compile/request_keys.cpp) and runs the compiler; this layer runs none: where it
// must ask the compiler (what NVRTC predefines), the caller hands it the probe
// (`compile_probe`).
//
// The layer, by folder (src/deps/):
//   directive_scanner, macro_expander    lexing a file's directives, expanding computed includes
//   header_scanner, closure_scan         the closure of a request: resolving names as NVRTC does
//   scan_inputs, scan_memos, scan_directories
//                                        what names a scan's memo, its families, the directories it asks
//   header_manifest, memo_reader, memo_writer
//                                        the manifest: its format, reading and writing it
//   directory_listings, toolkit_includes, predefined_macros
//                                        listings by identity, the toolkit's include names, NVRTC's macros
//   user_memo, toolkit_memo              memo files per user; what the toolkit is
//   working_directory, name_directory, base_dir
//                                        the paths a key holds: working directory, name's directory, base_dir
//   derivation, derivation_memo          a request's derivation and its reuse within the process
//
// Thread-safety: find_dependencies() is thread-safe (the layer's memos are locked).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "deps/header_scanner.hpp"
#include "deps/predefined_macros.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// What a request asks of the layer. `request` and `options` must outlive the call.
struct DependencyRequest {
  const CompileRequest* request = nullptr;    // source, program name, source path, in-memory headers
  const CanonicalOptions* options = nullptr;  // canonical NVRTC options: -I, --pre-include, -D
  std::string library_identity;               // the compiler's version and build id ("<version>\n<build id>")
  std::string toolkit_fingerprint;            // names the toolkit's headers (Toolkit::headers_fingerprint)
  std::filesystem::path toolkit_home;         // the toolkit's root; empty when unknown
  std::filesystem::path memo_dir;             // manifests across processes; empty: memory only
  std::filesystem::path user_memo_dir;        // per user (deps/user_memo.hpp); empty: kept in memo_dir
  ProbeCompile compile_probe = nullptr;       // asks the compiler what it predefines
  bool defer_member_checks = false;           // ScanInput::defer_member_checks
};

// What the layer found.
struct Dependencies {
  ScanResult scan;  // the header set, its manifest checks, the working directory names resolved against
  // SHA-256 of the source and of each in-memory header (the key holds them).
  std::array<std::uint8_t, 32> source_sha256{};
  std::vector<std::array<std::uint8_t, 32>> memory_header_sha256;
  std::vector<std::string> defines;  // the -D values, in order
  // The working directory NVRTC writes into this output (empty: it writes none).
  std::string keyed_directory;
  // True: the program name's directory cannot reach the output, so the key
  // holds the name's last component only (docs/keys.md, "The program name").
  bool name_directory_left_out = false;
  // True (with name_directory_left_out false): only the static rules' doubt
  // keeps it (deps/name_directory.hpp, `may_matter`): the compile decides from
  // evidence (compile/name_evidence.hpp), and `name_directory_because` says why.
  bool name_directory_by_evidence = false;
  std::string name_directory_because;
  // Non-empty: the request must be compiled without the cache, and why
  // (the scan's verdict, or a working directory that cannot be read).
  std::string not_cacheable;
};

// Finds what `in` depends on, as described above. Fails only with io when a
// file that exists cannot be read (scan_headers()).
Result<Dependencies> find_dependencies(const DependencyRequest& in);

}  // namespace kcache::jit
