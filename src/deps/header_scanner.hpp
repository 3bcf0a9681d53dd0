// deps/header_scanner.hpp: finds the headers a CUDA C++ compile can read from disk (private).
//
// NVRTC cannot report dependencies (NVRTC 13 rejects -M, -MD, -MF and
// --dependency-output), so kcache finds them itself: it scans the source, every
// in-memory header and every disk header it reaches for `#include`,
// `#include_next`, `#import` and `__has_include` directives
// (deps/directive_scanner.hpp: every conditional branch taken), and
// resolves each name the way NVRTC does: in-memory headers first (they win
// over files), then the includer's directory (and, conservatively, those of
// the files that included it), then each --include-path. Every file that
// exists on ANY candidate path is taken (not only the first), so the result is
// a superset of what the compile reads even where kcache's idea of the search
// order were wrong.
//
// Computed includes (`#include MACRO(x)`) are expanded with every definition
// of every macro they use, from every scanned file, the toolkit's headers and
// the command line (deps/macro_expander.hpp), and every header name that
// forms is resolved like a literal one. More definitions found later (in a
// header a computed include reached) expand them again, to a fixed point.
// Every identifier such an expansion looks up may also be predefined by
// NVRTC (`__CUDACC_VER_MAJOR__`, `__CUDA_ARCH__`, `__cplusplus` ...): NVRTC
// is asked (deps/predefined_macros.hpp) and each predefined value is one
// more definition. Such a scan depends on the request's options, so its
// manifest is named by the predefined context too: the manifest named without
// it only says "look there". An identifier whose value depends on where it is
// expanded (`__FILE__`, `__LINE__`), an operator, a function-like predefined
// macro, or a probe that fails make the request not cacheable.
//
// Files under the toolkit root are not scanned: the toolkit fingerprint covers
// them. But their includes resolve through the user's search path too, so
// every user directory on it (the --include-path directories outside the
// toolkit, the source's directory and the directories of the user headers
// found) is checked for every name a toolkit header includes
// (deps/toolkit_includes.hpp); each file found that way is in the key by
// content and is scanned like any user header.
//
// What a scan found is remembered in a manifest named by the digest of the
// scan's inputs (deps/header_manifest.hpp): in memory, and on disk under
// `memo_dir` when it is set. The next scan of the same inputs only stats the
// files and directories the manifest lists; while all are unchanged it returns
// the remembered result without reading a file. A scan that must run again
// re-reads only the headers whose identity changed.
//
// Thread-safety: scan_headers() is thread-safe (the memos are locked).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "deps/directive_scanner.hpp"
#include "deps/predefined_macros.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

struct ScanInput {
  std::string_view source;
  // SHA-256 of `source` and of each in-memory header, when the caller has
  // them already (the key holds them); computed here when left empty.
  std::array<std::uint8_t, 32> source_sha256{};
  std::vector<std::array<std::uint8_t, 32>> memory_header_sha256;
  std::string program_name;
  std::string source_path;
  const std::vector<NamedBytes>* memory_headers = nullptr;
  std::vector<std::string> include_dirs;
  std::vector<std::string> pre_includes;
  std::vector<std::string> defines;     // -D values (`NAME`, `NAME=VALUE`), in order
  std::filesystem::path toolkit_root;   // canonical; empty when unknown
  std::string toolkit_fingerprint;      // names the toolkit's headers (Toolkit::headers_fingerprint)
  std::filesystem::path memo_dir;       // where manifests are kept across processes; empty: memory only
  // Per user (`$XDG_CACHE_HOME/kcache-toolkit/`, deps/user_memo.hpp): what
  // depends only on the toolkit or on a file's identity (NVRTC's predefined
  // macros, the toolkit's include names, directory listings), shared by every
  // cache directory. Empty: kept in `memo_dir`.
  std::filesystem::path user_memo_dir;
  // What decides the macros NVRTC predefines for this request. Null: a
  // computed include that uses an identifier makes the request not cacheable.
  const PredefinedContext* predefined = nullptr;
  // A family member's result (another kernel over the same tree) may be
  // returned before its identities are checked (ScanResult::checked false):
  // a compile checks them once, after the lookup on a hit and after the
  // compile on a miss (compile/compiler.cpp), instead of before and after.
  bool defer_member_checks = false;
};

struct HeaderManifest;
struct ManifestChecks;

struct ScanResult {
  // Sorted by path, unique; from a manifest, made from it when first read
  // (HeaderList): a hit whose caller never reads them copies none.
  HeaderList headers;
  std::string not_cacheable;              // non-empty: a directive kcache cannot resolve (where and why)
  // Why the program name's directory can reach NVRTC's output through what
  // the closure holds (deps/name_directory.hpp); empty when it cannot.
  std::string name_directory_seen;
  // With it empty: why it may (only evidence decides: deps/name_directory.hpp); empty when it cannot.
  std::string name_directory_doubt;
  std::vector<std::string> file_macros;  // with it empty: the closure's macros that may expand __FILE__
  bool reused = false;                    // from a manifest that still applied: no file was read
  // 64 hex: the key's "disk_headers" digest of `headers` with their paths as
  // they are (HeaderManifest::list), remembered with the manifest; empty when unknown.
  std::string headers_list;
  // What a later derivation in this process must re-check for this result to
  // hold again (reuse_checks()), and the working directory (`getcwd`) the
  // names were resolved against. Null when the result cannot be reused
  // without a scan (an identity too recent to trust, an unreadable directory).
  std::shared_ptr<const ManifestChecks> checks;
  std::string working_directory;
  // False: a family member's result taken unchecked (ScanInput::
  // defer_member_checks); `checks` is set, and until it passed the result is
  // only a guess (it picks a lookup; a hit or a compile is trusted only after).
  bool checked = true;
};

// Scans as described above. Fails only with io when a file that exists cannot be read.
Result<ScanResult> scan_headers(const ScanInput& input);

// `path` made canonical (symlinks resolved), remembered for the life of the
// process like the toolkit it names; `path` itself when it cannot be resolved.
std::string canonical_path(const std::string& path);

// The part of `m` that a derivation must re-check within this process: every
// header, and every directory outside `toolkit_root`. Toolkit directories are
// trusted for the life of the process once checked, as the toolkit
// fingerprint is (computed once per process): a file added to the toolkit's
// include directory is noticed by the next process. Null when some header's
// identity was too recent to trust (such a check could never pass). Shares
// `m` (no copy): the toolkit's directories are only flagged.
std::shared_ptr<const ManifestChecks> reuse_checks(const std::shared_ptr<const HeaderManifest>& m,
                                                   const std::string& toolkit_root);

// Forgets the in-process memos (manifests, per-file facts and remembered
// derivations); for tests and benchmarks.
void forget_scan_memos();

}  // namespace kcache::jit
