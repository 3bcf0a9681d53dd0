// compile/request_keys.cpp: the key of each request kind (compile/request_keys.hpp).
#include "compile/request_keys.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/backends.hpp"
#include "compile/name_evidence.hpp"
#include "deps/base_dir.hpp"
#include "deps/dependencies.hpp"
#include "deps/header_manifest.hpp"
#include "deps/toolkit_includes.hpp"
#include "deps/working_directory.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/toolkit.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace {

using Derived = Derivation;

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Where header manifests are kept across processes: `headers` beside the
// toolkit memo directory ($KCACHE_DIR/v1/headers by default); none when the
// toolkit memo is off (set_memo_dir({}), or KCACHE_DISABLE says the cache
// keeps nothing).
std::filesystem::path header_memo_dir(Toolkit& tk) {
  const auto toolkit_memo = tk.memo_dir();
  if (toolkit_memo.empty()) {
    return {};
  }
  return toolkit_memo.parent_path() / "headers";
}

// Where what depends only on the toolkit or on a file's identity is kept for
// every cache directory of the user: beside the per-user toolkit memo
// (`$XDG_CACHE_HOME/kcache-toolkit/`, deps/user_memo.hpp); none when the
// toolkit memo is off.
std::filesystem::path user_memo_dir(Toolkit& tk) {
  const auto file = tk.memo_file();
  return file.empty() ? std::filesystem::path() : file.parent_path();
}

// Up to this many disk headers, each is its own key field (`kcache why-miss`
// names the one that changed); above it, one digest covers the list.
constexpr std::size_t k_max_header_fields = 64;

// The 32 bytes of a 64-digit lowercase hex SHA-256 the scanner produced (a
// hit of a large header tree decodes hundreds of them).
std::array<std::uint8_t, 32> digest_of_hex(std::string_view hex) {
  auto nibble = [](char c) { return static_cast<std::uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); };
  std::array<std::uint8_t, 32> d{};
  for (std::size_t i = 0; i < d.size() && 2 * i + 1 < hex.size(); ++i) {
    d[i] = static_cast<std::uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return d;
}

void add_identity(KeyBuilder& kb, const LibraryIdentity& id) {
  kb.add("backend.version", id.version);
  kb.add("backend.build_id", id.build_id);
}

// The request's NVRTC options checked and in NVRTC's own spelling: what the
// backend is handed, with the cache or without it (a cached compile keys this
// list, so a hit and a miss compile the same thing).
Result<CanonicalOptions> nvrtc_options_of(const CompileRequest& r) {
  if (r.target_kind != "ptx" && r.target_kind != "cubin" && r.target_kind != "ltoir") {
    return make_error(ErrorCode::invalid_argument,
                      "NVRTC target must be ptx, cubin or ltoir, not '" + r.target_kind + "'");
  }
  auto options = r.options;
  if (r.target_kind == "ltoir") {
    options.emplace_back("--dlink-time-opt");
  }
  auto canon = canonicalize_nvrtc_options(options);
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  if (r.target_kind == "ltoir") {
    // Added above; drop duplicates so "-dlto" given by the caller keys the same.
    auto& o = canon->options;
    const auto first = std::find(o.begin(), o.end(), "--dlink-time-opt");
    o.erase(std::remove(std::next(first), o.end(), std::string("--dlink-time-opt")), o.end());
  }
  if (r.target_kind == "cubin" && canon->arch.rfind("sm_", 0) != 0) {
    return make_error(ErrorCode::invalid_argument,
                      "a cubin needs a real architecture: add -arch=sm_XX (got '" + canon->arch + "')");
  }
  return canon;
}

// `defer`: a family member's result may be taken unchecked (Derivation::checked).
Result<Derived> derive_nvrtc(const CompileRequest& r, bool defer) {
  auto canon = nvrtc_options_of(r);
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  auto& tk = Toolkit::instance();
  auto id = tk.identify(ToolkitLibrary::nvrtc);
  if (!id) {
    return tl::unexpected(id.error());
  }
  auto fingerprint = tk.headers_fingerprint();
  if (!fingerprint) {
    return tl::unexpected(fingerprint.error());
  }
  Derived d;
  d.library = ToolkitLibrary::nvrtc;
  d.version = id->version;
  d.arch = canon->arch;
  // What the compile depends on (deps/dependencies.hpp).
  DependencyRequest dr;
  dr.request = &r;
  dr.options = &*canon;
  dr.library_identity = id->version + "\n" + id->build_id;
  dr.toolkit_fingerprint = *fingerprint;
  dr.toolkit_home = tk.cuda_home();
  dr.memo_dir = header_memo_dir(tk);
  if (!dr.memo_dir.empty()) {
    dr.user_memo_dir = user_memo_dir(tk);
  }
  dr.compile_probe = run_nvrtc_probe;
  // Not with base_dir: its verdict reads the headers' bytes, which must be the ones keyed.
  dr.defer_member_checks = defer && base_dir_setting().empty();
  auto found = find_dependencies(dr);
  if (!found) {
    return tl::unexpected(found.error());
  }
  Dependencies& deps = *found;
  ScanResult& scanned = deps.scan;
  d.keyed_directory = deps.keyed_directory;
  d.not_cacheable = deps.not_cacheable;
  std::string keyed_cwd = deps.keyed_directory;
  // base_dir above the checkouts (/home): paths under it are keyed relative
  // to the working directory when that is under it too (deps/base_dir.hpp).
  const std::string base_setting = base_dir_setting();
  const std::string base_anchor = base_dir_anchor(base_setting);
  // How `name` is keyed: as given, its basename with the directory left out
  // by the static rules, or by evidence (compile/name_evidence.hpp).
  enum class NameKey { as_given, left_out, by_evidence };
  NameKey name_key = deps.name_directory_left_out ? NameKey::left_out : NameKey::as_given;
  const std::size_t name_slash = r.name.rfind('/');
  const std::string basename = name_slash == std::string::npos ? r.name : r.name.substr(name_slash + 1);

  // The key, with the paths under `base` keyed relative to it (none when
  // empty) and `verdict` as the base_dir field (none when empty).
  auto build = [&](const std::string& base, const std::string& verdict) {
    auto keyed = [&](const std::string& path) { return keyed_path(path, base, base_anchor); };
    KeyBuilder kb("nvrtc");
    add_identity(kb, *id);
    kb.add("toolkit.headers", *fingerprint);
    kb.add("input_kind", "cuda");
    kb.add("target_kind", r.target_kind);
    if (name_key != NameKey::as_given) {
      kb.add("name", basename);
      kb.add("name_directory", name_key == NameKey::left_out ? std::string_view("left out") : k_left_out_by_evidence);
    } else {
      kb.add("name", keyed(r.name));
    }
    if (!keyed_cwd.empty()) {
      kb.add("working_directory", keyed_cwd);
    }
    kb.add_digest("source", deps.source_sha256);
    for (const auto& o : canon->options) {
      const auto eq = o.find('=');
      const bool path_option = o.rfind("--include-path=", 0) == 0 || o.rfind("--pre-include=", 0) == 0;
      kb.add("option", path_option ? o.substr(0, eq + 1) + keyed(o.substr(eq + 1)) : o);
    }
    for (std::size_t i = 0; i < r.headers.size(); ++i) {
      kb.add_digest("header:" + keyed(r.headers[i].name), deps.memory_header_sha256[i]);
    }
    for (const auto& e : r.name_expressions) {
      kb.add("name_expression", e);
    }
    kb.add_content("extra_digest", r.extra_digest);
    if (base.empty() && scanned.headers.size() > k_max_header_fields && scanned.headers_list.size() == 64) {
      // A large tree with the paths as they are: the digest of the list (as
      // below) is the one the scan's manifest remembers. A hit neither copies
      // nor hashes the list again.
      kb.add("disk_headers.count", std::to_string(scanned.headers.size()));
      kb.add_digest("disk_headers", digest_of_hex(scanned.headers_list));
      if (!verdict.empty()) {
        kb.add("base_dir", verdict);
      }
      return kb;
    }
    std::vector<std::pair<std::string, const std::string*>> headers;  // keyed path, SHA-256
    for (const auto& h : scanned.headers) {
      headers.emplace_back(keyed(h.path), &h.sha256);
    }
    if (!base.empty()) {
      std::sort(headers.begin(), headers.end());
    }
    if (headers.size() <= k_max_header_fields) {
      for (const auto& [path, sha] : headers) {
        kb.add_digest("disk_header:" + path, digest_of_hex(*sha));
      }
    } else {
      // A large tree keys as one digest over the sorted (path, SHA-256) list:
      // the same information, without a passport that grows by a field per
      // header and is parsed on every hit. `--json` still lists the headers.
      kb.add("disk_headers.count", std::to_string(headers.size()));
      util::Sha256 list;
      for (const auto& [path, sha] : headers) {
        add_to_header_list(list, path, *sha);
      }
      kb.add_digest("disk_headers", list.finish());
    }
    if (!verdict.empty()) {
      kb.add("base_dir", verdict);
    }
    return kb;
  };
  // A relative `#line` name under --generate-line-info is joined to the
  // working directory in the line table (deps/working_directory.hpp). The
  // verdict depends only on bytes the key holds by digest: remembered per key.
  if (keyed_cwd.empty() && d.not_cacheable.empty() && contains(canon->options, "--generate-line-info")) {
    const std::string plain_hex = build({}, {}).key().hex();
    auto verdict = remembered_verdict(plain_hex, dr.memo_dir, VerdictKind::line_names);
    if (!verdict) {
      const std::string why = files_with_relative_line(r, scanned.headers.vector());
      verdict = why.empty() ? std::string("none") : why;
      remember_verdict(plain_hex, dr.memo_dir, *verdict, VerdictKind::line_names);
    }
    if (*verdict != "none") {
      if (auto cwd = nvrtc_working_directory()) {
        keyed_cwd = *cwd;
        d.keyed_directory = *cwd;
      } else {
        d.not_cacheable = "NVRTC writes the working directory into this output (--generate-line-info and " +
                          *verdict + ") and it cannot be read: " + cwd.error().describe();
      }
    }
  }
  d.key = build({}, {});
  d.base_dir_setting = base_setting;
  // Only the static rules' doubt keeps the directory: the evidence key is
  // looked up first, unless an earlier compile found that the directory
  // matters. Not with base_dir (whose verdict keys other variants of the key).
  if (deps.name_directory_by_evidence && d.base_dir_setting.empty() && d.not_cacheable.empty() &&
      in_temporary_directory(r.name)) {
    name_key = NameKey::by_evidence;
    KeyBuilder evidence = build({}, {});
    name_key = NameKey::as_given;
    if (!name_directory_matters_remembered(evidence.key().hex(), dr.memo_dir)) {
      d.name_full_key = std::make_shared<const KeyBuilder>(std::move(d.key));
      d.key = std::move(evidence);
    }
  }
  if (const auto& base = d.base_dir_setting; !base.empty() && d.not_cacheable.empty()) {
    KeyBuilder relative = build(base, "relative");
    // Nothing under base_dir: the key is the same either way.
    if (build(base, {}).key() != d.key.key()) {
      const std::string rel_hex = relative.key().hex();
      auto verdict = remembered_verdict(rel_hex, dr.memo_dir);
      if (!verdict) {
        std::string why = paths_reach_output_because(r, *canon);
        if (why.empty()) {
          // The toolkit's macros that name the file (`_CCCL_BUILTIN_FILE`):
          // listed once per toolkit, from the memo the scan reads too.
          std::shared_ptr<const ToolkitIncludes> toolkit;
          if (!dr.toolkit_home.empty()) {
            toolkit = toolkit_includes(canonical_path(dr.toolkit_home.string()), dr.toolkit_fingerprint,
                                       dr.user_memo_dir, dr.memo_dir);
          }
          why = files_name_their_location(r, scanned.headers.vector(), base,
                                          toolkit ? &toolkit->location_macros() : nullptr);
        }
        verdict = why.empty() ? std::string("relative") : "absolute: " + why;
        remember_verdict(rel_hex, dr.memo_dir, *verdict);
      }
      d.key = *verdict == "relative" ? std::move(relative) : build({}, *verdict);
      d.base_dir = *verdict == "relative" ? base : std::string();
      d.relative_key = rel_hex;
    }
  }
  d.headers = std::move(scanned.headers);
  d.options = std::move(canon->options);
  d.checks = std::move(scanned.checks);
  d.checked = scanned.checked;
  d.scan_directory = std::move(scanned.working_directory);
  d.memo_dir = std::move(dr.memo_dir);
  return d;
}

// The request's nvJitLink options, checked (see nvrtc_options_of).
Result<CanonicalOptions> nvjitlink_options_of(const CompileRequest& r) {
  if (r.target_kind != "cubin" && r.target_kind != "ptx") {
    return make_error(ErrorCode::invalid_argument, "nvJitLink target must be cubin or ptx, not '" + r.target_kind + "'");
  }
  if (r.inputs.empty()) {
    return make_error(ErrorCode::invalid_argument, "a link needs at least one input");
  }
  auto options = r.options;
  if (r.target_kind == "ptx" && !contains(options, "-ptx")) {
    options.emplace_back("-ptx");
  }
  auto canon = canonicalize_nvjitlink_options(options);
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  if (canon->arch.rfind("sm_", 0) != 0) {
    return make_error(ErrorCode::invalid_argument, "a link needs -arch=sm_XX (got '" + canon->arch + "')");
  }
  return canon;
}

Result<Derived> derive_nvjitlink(const CompileRequest& r) {
  auto canon = nvjitlink_options_of(r);
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  auto id = Toolkit::instance().identify(ToolkitLibrary::nvjitlink);
  if (!id) {
    return tl::unexpected(id.error());
  }
  Derived d;
  d.library = ToolkitLibrary::nvjitlink;
  d.version = id->version;
  d.arch = canon->arch;
  d.key = KeyBuilder("nvjitlink");
  add_identity(d.key, *id);
  d.key.add("target_kind", r.target_kind);
  d.key.add("name", r.name);
  for (const auto& o : canon->options) {
    d.key.add("option", o);
  }
  for (const auto& in : r.inputs) {
    d.key.add("input.kind", in.kind);
    d.key.add_content("input:" + in.name, in.bytes);
  }
  d.key.add_content("extra_digest", r.extra_digest);
  d.options = std::move(canon->options);
  return d;
}

// The request's libNVVM options, checked (see nvrtc_options_of).
Result<CanonicalOptions> nvvm_options_of(const CompileRequest& r) {
  if (r.target_kind != "ptx" && r.target_kind != "ltoir") {
    return make_error(ErrorCode::invalid_argument, "libNVVM target must be ptx or ltoir, not '" + r.target_kind + "'");
  }
  auto options = r.options;
  if (r.target_kind == "ltoir" && !contains(options, "-gen-lto")) {
    options.emplace_back("-gen-lto");
  }
  return canonicalize_nvvm_options(options);
}

Result<Derived> derive_nvvm(const CompileRequest& r) {
  auto canon = nvvm_options_of(r);
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  auto id = Toolkit::instance().identify(ToolkitLibrary::nvvm);
  if (!id) {
    return tl::unexpected(id.error());
  }
  Derived d;
  d.library = ToolkitLibrary::nvvm;
  d.version = id->version;
  d.arch = canon->arch;
  d.key = KeyBuilder("nvvm");
  add_identity(d.key, *id);
  d.key.add("input_kind", "nvvm");
  d.key.add("target_kind", r.target_kind);
  d.key.add("name", r.name);
  d.key.add_content("source", r.source);
  for (const auto& o : canon->options) {
    d.key.add("option", o);
  }
  for (const auto& in : r.inputs) {
    d.key.add_content("module:" + in.name, in.bytes);
  }
  d.key.add_content("extra_digest", r.extra_digest);
  d.options = std::move(canon->options);
  return d;
}

}  // namespace

Result<Derived> derive(const CompileRequest& r, Checks checks) {
  if (r.backend == "nvrtc") {
    return derive_nvrtc(r, checks == Checks::deferred);
  }
  if (r.backend == "nvjitlink") {
    return derive_nvjitlink(r);
  }
  if (r.backend == "nvvm") {
    return derive_nvvm(r);
  }
  return make_error(ErrorCode::invalid_argument,
                    "unknown backend '" + r.backend + "' (nvrtc, nvjitlink or nvvm)");
}

Result<Derivation> derive_unkeyed(const CompileRequest& r) {
  Result<CanonicalOptions> canon = make_error(ErrorCode::invalid_argument,
                                              "unknown backend '" + r.backend + "' (nvrtc, nvjitlink or nvvm)");
  ToolkitLibrary library = ToolkitLibrary::nvrtc;
  if (r.backend == "nvrtc") {
    canon = nvrtc_options_of(r);
  } else if (r.backend == "nvjitlink") {
    canon = nvjitlink_options_of(r);
    library = ToolkitLibrary::nvjitlink;
  } else if (r.backend == "nvvm") {
    canon = nvvm_options_of(r);
    library = ToolkitLibrary::nvvm;
  }
  if (!canon) {
    return tl::unexpected(canon.error());
  }
  auto id = Toolkit::instance().identify(library);
  if (!id) {
    return tl::unexpected(id.error());
  }
  Derived d;
  d.library = library;
  d.version = id->version;
  d.arch = canon->arch;
  d.options = std::move(canon->options);
  d.key = KeyBuilder(r.backend);
  add_identity(d.key, *id);
  return d;
}
}  // namespace kcache::jit
