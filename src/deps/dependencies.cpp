#include "deps/dependencies.hpp"

#include <algorithm>
#include <string_view>

#include "deps/name_directory.hpp"
#include "deps/working_directory.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

Result<Dependencies> find_dependencies(const DependencyRequest& in) {
  const CompileRequest& r = *in.request;
  const CanonicalOptions& canon = *in.options;
  Dependencies deps;
  // Only where NVRTC writes it into the output (docs/keys.md), so release
  // builds of a relocated project still share entries.
  std::string location_problem;
  if (const auto why = working_directory_embedded_because(r, canon); !why.empty()) {
    if (auto cwd = nvrtc_working_directory()) {
      deps.keyed_directory = *cwd;
    } else {
      location_problem = "NVRTC writes the working directory into this output (" + why +
                         ") and it cannot be read: " + cwd.error().describe();
    }
  }
  // The digests also name the header manifest (scan.*_sha256): hashed once.
  ScanInput scan;
  scan.source_sha256 = util::sha256(r.source);
  for (const auto& h : r.headers) {
    scan.memory_header_sha256.push_back(util::sha256(h.bytes));
  }
  scan.source = r.source;
  scan.program_name = r.name;
  scan.source_path = r.source_path;
  scan.memory_headers = &r.headers;
  scan.include_dirs = canon.include_dirs;
  scan.pre_includes = canon.pre_includes;
  for (const auto& o : canon.options) {
    if (o.rfind("--define-macro=", 0) == 0) {
      scan.defines.push_back(o.substr(15));
    }
  }
  if (!in.toolkit_home.empty()) {
    scan.toolkit_root = canonical_path(in.toolkit_home.string());
  }
  scan.toolkit_fingerprint = in.toolkit_fingerprint;
  scan.memo_dir = in.memo_dir;
  scan.user_memo_dir = in.user_memo_dir;
  // Asked of NVRTC only when a computed include uses an identifier (and then
  // once per context and user: deps/predefined_macros.hpp).
  const auto predefined = predefined_context(in.library_identity, in.toolkit_fingerprint, canon.options,
                                             in.compile_probe, scan.user_memo_dir, scan.memo_dir);
  scan.predefined = &predefined;
  scan.defer_member_checks = in.defer_member_checks;
  auto scanned = scan_headers(scan);
  if (!scanned) {
    return tl::unexpected(scanned.error());
  }
  deps.not_cacheable = scanned->not_cacheable;
  if (!location_problem.empty()) {
    deps.not_cacheable = location_problem;
  }
  // The program name's directory is keyed only where the output can depend
  // on it (docs/keys.md, "The program name"): `__FILE__` and the module id
  // need the basename only, which is always keyed. A name without a
  // directory is judged too, so that `kern.cu` and `/abs/kern.cu` share a key
  // where the directory cannot matter.
  const auto has_option = [&](std::string_view o) {
    return std::find(canon.options.begin(), canon.options.end(), o) != canon.options.end();
  };
  const std::size_t name_slash = r.name.rfind('/');
  if (!r.name.empty() && name_slash + 1 != r.name.size()) {
    NameDirectoryVerdict verdict;
    if (r.target_kind == "ltoir") {
      verdict = {NameDirectoryClass::matters, "an LTO-IR target names it"};
    } else if (has_option("--device-debug") || has_option("--generate-line-info")) {
      verdict = {NameDirectoryClass::matters, "line tables name it"};
    } else {
      verdict = name_directory_verdict(r.source, scan.defines, scanned->name_directory_seen,
                                       scanned->name_directory_doubt, scanned->file_macros);
    }
    deps.name_directory_left_out = verdict.kind == NameDirectoryClass::cannot_matter;
    deps.name_directory_by_evidence = verdict.kind == NameDirectoryClass::may_matter;
    deps.name_directory_because = std::move(verdict.because);
  }
  deps.source_sha256 = scan.source_sha256;
  deps.memory_header_sha256 = std::move(scan.memory_header_sha256);
  deps.defines = std::move(scan.defines);
  deps.scan = std::move(*scanned);
  return deps;
}

}  // namespace kcache::jit
