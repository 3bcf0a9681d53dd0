// deps/closure_scan.hpp: one full header scan (private).
//
// Finds every header the source, the in-memory headers and the disk headers
// they reach can include, as deps/header_scanner.hpp describes, and
// records in a manifest what the result depends on (each header's identity
// and digest, each directory looked in and the names looked for there). It
// runs when no remembered manifest still applies; deps/header_scanner.cpp
// decides that and keeps the manifests.
//
// Thread-safety: scan_closure() is thread-safe (it shares only the locked
// process memos of deps/scan_memos.hpp).
#pragma once

#include <string_view>

#include "deps/header_manifest.hpp"
#include "deps/header_scanner.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// Starts `not_cacheable` of a manifest whose scan met a computed include that
// uses identifiers NVRTC may predefine: its result is under the manifest named
// with the predefined context too (scan_headers()). Never a real reason (those
// start with a location).
inline constexpr std::string_view k_needs_predefined = "=predefined: ";

// Where the directory listings of a scan of `in` are kept: the per-user memo
// directory, else the cache directory's (deps/directory_listings.hpp).
inline const std::filesystem::path& listings_dir(const ScanInput& in) {
  return in.user_memo_dir.empty() ? in.memo_dir : in.user_memo_dir;
}

// Scans the closure of `in`. `previous` (may be null): a manifest whose
// per-header facts are taken for headers whose identity is unchanged instead
// of reading them. `with_predefined`: the identifiers NVRTC predefines for
// `in.predefined` are definitions too; without it, a computed include that uses
// one makes `not_cacheable` start with k_needs_predefined.
// The manifest's `input` is left empty. Fails only with io when a file that
// exists cannot be read.
Result<HeaderManifest> scan_closure(const ScanInput& in, const HeaderManifest* previous, bool with_predefined);

}  // namespace kcache::jit
