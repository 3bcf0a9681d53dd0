#include "kcache/compiler.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "compile/backends.hpp"
#include "compile/elf_file.hpp"
#include "deps/base_dir.hpp"
#include "deps/dependencies.hpp"
#include "deps/derivation_memo.hpp"
#include "deps/header_manifest.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/toolkit.hpp"
#include "util/clock.hpp"
#include "util/hex.hpp"
#include "util/random_bytes.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace {

using util::Clock;
using util::micros_since;

// Everything derive() learns about a request (deps/derivation.hpp).
using Derived = jit::Derivation;

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
  jit::DependencyRequest dr;
  dr.request = &r;
  dr.options = &*canon;
  dr.library_identity = id->version + "\n" + id->build_id;
  dr.toolkit_fingerprint = *fingerprint;
  dr.toolkit_home = tk.cuda_home();
  dr.memo_dir = header_memo_dir(tk);
  if (!dr.memo_dir.empty()) {
    dr.user_memo_dir = user_memo_dir(tk);
  }
  dr.compile_probe = jit::run_nvrtc_probe;
  // Not with base_dir: its verdict reads the headers' bytes, which must be the ones keyed.
  dr.defer_member_checks = defer && jit::base_dir_setting().empty();
  auto found = jit::find_dependencies(dr);
  if (!found) {
    return tl::unexpected(found.error());
  }
  jit::Dependencies& deps = *found;
  jit::ScanResult& scanned = deps.scan;
  d.keyed_directory = deps.keyed_directory;
  d.not_cacheable = deps.not_cacheable;
  const std::string& keyed_cwd = deps.keyed_directory;
  const bool name_directory_left_out = deps.name_directory_left_out;
  const std::size_t name_slash = r.name.rfind('/');

  // The key, with the paths under `base` keyed relative to it (none when
  // empty) and `verdict` as the base_dir field (none when empty).
  auto build = [&](const std::string& base, const std::string& verdict) {
    auto keyed = [&](const std::string& path) { return jit::relative_to_base(path, base); };
    KeyBuilder kb("nvrtc");
    add_identity(kb, *id);
    kb.add("toolkit.headers", *fingerprint);
    kb.add("input_kind", "cuda");
    kb.add("target_kind", r.target_kind);
    if (name_directory_left_out) {
      kb.add("name", r.name.substr(name_slash + 1));
      kb.add("name_directory", "left out");
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
        jit::add_to_header_list(list, path, *sha);
      }
      kb.add_digest("disk_headers", list.finish());
    }
    if (!verdict.empty()) {
      kb.add("base_dir", verdict);
    }
    return kb;
  };
  d.key = build({}, {});
  d.base_dir_setting = jit::base_dir_setting();
  if (const auto& base = d.base_dir_setting; !base.empty() && d.not_cacheable.empty()) {
    KeyBuilder relative = build(base, "relative");
    // Nothing under base_dir: the key is the same either way.
    if (build(base, {}).key() != d.key.key()) {
      const std::string rel_hex = relative.key().hex();
      auto verdict = jit::remembered_verdict(rel_hex, dr.memo_dir);
      if (!verdict) {
        std::string why = jit::paths_reach_output_because(r, *canon);
        if (why.empty()) {
          why = jit::files_name_their_location(r, scanned.headers.vector(), base);
        }
        verdict = why.empty() ? std::string("relative") : "absolute: " + why;
        jit::remember_verdict(rel_hex, dr.memo_dir, *verdict);
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

// When a derivation's disk identities are checked: before it is returned, or
// by the caller later (compile(): once, after the lookup on a hit and after
// the compile on a miss, instead of before and after).
enum class Checks { now, deferred };

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

// A derivation, shared, and whether its disk identities were checked for this
// use (false: jit::derivation_still_holds() must pass before its key is trusted).
struct SharedDerived {
  std::shared_ptr<const Derived> d;
  bool checked = true;
  const Derived* operator->() const { return d.get(); }
  const Derived& operator*() const { return *d; }
};

// derive(), with the key computed, served from the process's memo
// (deps/derivation_memo.hpp) while nothing it depended on changed. Shared:
// the memo and every caller that got the same derivation hold it. With
// Checks::deferred a remembered derivation, or a family member's result, comes
// back unchecked (SharedDerived::checked false).
Result<SharedDerived> derive_shared(const CompileRequest& r, Checks checks = Checks::now) {
  const std::uint64_t generation = Toolkit::instance().generation();
  auto& memo = jit::DerivationMemo::instance();
  const bool remembered = r.backend == "nvrtc";
  if (remembered) {
    if (auto d = memo.find(r, generation, checks == Checks::now);
        d && d->base_dir_setting == jit::base_dir_setting()) {
      return SharedDerived{std::move(d), checks == Checks::now};
    }
  }
  auto d = derive(r, checks);
  if (!d) {
    return tl::unexpected(d.error());
  }
  d->key_value = d->key.key();
  auto shared = std::make_shared<const Derived>(std::move(*d));
  if (remembered) {
    memo.remember(r, generation, shared);
  }
  const bool checked = shared->checked;
  return SharedDerived{std::move(shared), checked};
}

std::int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A key no other request can have, for an artifact compiled outside the cache.
void make_unique_key(Derived& d) {
  // From getrandom(2), not std::random_device: GCC 12's static libstdc++
  // implements that with arc4random, which ties the kcache command to glibc
  // 2.36 (docs/install.md). Should the kernel refuse, the time and the pid
  // still make the key unique.
  std::array<std::uint8_t, 16> r{};
  const std::string nonce = util::random_bytes(r.data(), r.size(), "a key nonce")
                                ? util::to_hex(r.data(), r.size())
                                : std::to_string(realtime_ns()) + ":" + std::to_string(::getpid());
  d.key.add("not_cacheable", d.not_cacheable);
  d.key.add("nonce", nonce);
  d.key_value = d.key.key();
}

// Why an artifact compiled without a cache has no key of its own.
constexpr std::string_view k_compiled_without_cache = "compiled without a cache";

// What a compile without a cache needs and nothing more: the backend's checked
// options (the list a cached compile hands it too), the arch and the
// library's version. No key is derived: no header is scanned or re-checked,
// no input hashed, no memo read. The key is one no other request has.
Result<Derived> prepare_without_cache(const CompileRequest& r) {
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
  d.not_cacheable = std::string(k_compiled_without_cache);
  make_unique_key(d);
  return d;
}

// Runs the backend for an already derived request. `checked`: whether `d`'s
// disk identities were checked before the compile (false: the check after it
// is the only one, and when it fails the result may still be kept under the
// key of the tree the compile read, see below). `switch_key`: whether the
// result may be returned under another key than `d`'s (compile() may; a
// caller that looked up `d`'s key itself may not).
Result<Artifact> run_derived(const CompileRequest& r, Derived& d, CompileInfo* info, bool checked = true,
                             bool switch_key = false) {
  const std::int64_t started_ns = realtime_ns();
  const auto start = Clock::now();
  Result<jit::BackendOutput> out = [&]() {
    switch (d.library) {
      case ToolkitLibrary::nvrtc:
        return jit::run_nvrtc(r, d.options);
      case ToolkitLibrary::nvjitlink:
        return jit::run_nvjitlink(r, d.options);
      case ToolkitLibrary::nvvm:
        return jit::run_nvvm(r, d.options);
    }
    return Result<jit::BackendOutput>(make_error(ErrorCode::internal, "unknown library"));
  }();
  const auto duration = micros_since(start);
  if (info != nullptr) {
    info->compile_us = duration;
  }
  if (!out) {
    return tl::unexpected(out.error());
  }
  if (r.target_kind == "cubin") {
    if (auto ok = check_cubin(out->payload, d.arch); !ok) {
      return make_error(ErrorCode::compile_failed,
                        "the compiler returned a cubin that fails kcache's check: " + ok.error().message, out->log);
    }
  }
  bool cacheable = d.not_cacheable.empty();
  std::string reason = d.not_cacheable;
  if (cacheable && !d.base_dir.empty() && jit::output_names_base(out->payload, d.base_dir)) {
    // Keyed relative to base_dir, yet the output names a path under it (a
    // macro kcache did not see): never shared. Keyed absolute from now on.
    jit::remember_verdict(d.relative_key, d.memo_dir,
                          "absolute: the output names a path under base_dir");
    jit::DerivationMemo::instance().clear();
    cacheable = false;
    reason = "the output names a path under base_dir (" + d.base_dir +
             "), so it cannot be shared; the next compile keys it with absolute paths";
  }
  if (cacheable && r.backend == "nvrtc") {
    // A header edited while the compile ran would leave a binary that matches
    // neither version: derive again (checked: for an unchecked `d` this is its
    // one check) and keep the result out of the cache if anything changed.
    auto again = derive_shared(r);
    if (!again || (*again)->key_value != d.key_value) {
      // `d` was a family member's result taken unchecked and the tree had
      // changed since that member was recorded. When nothing the new
      // derivation depends on changed since before the compile started (older
      // than the racy window), the compile read exactly that tree: its key.
      const bool before_compile = !checked && switch_key && again && (*again)->not_cacheable.empty() &&
                                  (*again)->checks != nullptr && (*again)->scan_directory == d.scan_directory &&
                                  jit::manifest_unchanged_since(*(*again)->checks->manifest, started_ns);
      if (before_compile) {
        d = **again;  // the callers report d.headers
      } else {
        cacheable = false;
        reason = checked ? "a header changed while the compile ran"
                         : "a header changed shortly before or while the compile ran";
      }
    }
  }
  if (!cacheable && d.not_cacheable.empty()) {
    d.not_cacheable = reason;
    make_unique_key(d);
  }
  Artifact a = Artifact::make(d.key, r.target_kind, std::move(out->payload), Producer{r.backend, d.version},
                              Target{d.arch, ""});
  a.passport.log = std::move(out->log);
  if (a.passport.log.size() > k_passport_max_log_bytes) {
    a.passport.log.resize(k_passport_max_log_bytes);
  }
  a.passport.symbols = std::move(out->symbols);
  a.passport.compile_duration_us = duration;
  if (info != nullptr) {
    info->key = a.passport.key;
    info->cacheable = cacheable;
    info->not_cacheable_reason = reason;
  }
  return a;
}

}  // namespace

struct HeaderList::State {
  std::once_flag made;
  std::function<std::vector<HeaderDependency>()> make;  // empty once made
  std::vector<HeaderDependency> list;
};

HeaderList::HeaderList(std::vector<HeaderDependency> headers) : m_size(headers.size()) {
  if (!headers.empty()) {
    m_state = std::make_shared<State>();
    m_state->list = std::move(headers);
    std::call_once(m_state->made, [] {});
  }
}

HeaderList::HeaderList(std::size_t size, std::function<std::vector<HeaderDependency>()> make) : m_size(size) {
  if (size != 0) {
    m_state = std::make_shared<State>();
    m_state->make = std::move(make);
  }
}

const std::vector<HeaderDependency>& HeaderList::vector() const {
  static const std::vector<HeaderDependency> none;
  if (!m_state) {
    return none;
  }
  std::call_once(m_state->made, [this] {
    m_state->list = m_state->make();
    m_state->make = nullptr;
  });
  return m_state->list;
}

Result<KeyBuilder> derive_key(const CompileRequest& request, HeaderList* headers) {
  auto d = derive_shared(request);
  if (!d) {
    return tl::unexpected(d.error());
  }
  if (!(*d)->not_cacheable.empty()) {
    return make_error(ErrorCode::unsupported, "not cacheable: " + (*d)->not_cacheable);
  }
  if (headers != nullptr) {
    *headers = (*d)->headers;  // shared, not copied
  }
  return (*d)->key;
}

Result<KeyBuilder> derive_key(const CompileRequest& request, std::vector<HeaderDependency>* headers) {
  HeaderList list;
  auto key = derive_key(request, headers != nullptr ? &list : nullptr);
  if (key && headers != nullptr) {
    *headers = list.vector();
  }
  return key;
}

Result<Artifact> compile_uncached(const CompileRequest& request, CompileInfo* info) {
  // The caller derived the key a moment ago (derive_key): the check after the
  // compile is the one that matters, so the derivation is not checked twice.
  auto shared = derive_shared(request, Checks::deferred);
  if (!shared) {
    return tl::unexpected(shared.error());
  }
  Derived d = **shared;
  if (!d.not_cacheable.empty()) {
    make_unique_key(d);
  }
  const bool was_loaded = Toolkit::instance().is_loaded(d.library);
  auto a = run_derived(request, d, info, shared->checked);
  if (info != nullptr) {
    info->toolkit_loaded = !was_loaded && Toolkit::instance().is_loaded(d.library);
    if (a) {
      info->headers = std::move(d.headers);  // the compiled tree's
    }
  }
  return a;
}

Result<Artifact> compile_without_cache(const CompileRequest& request, CompileInfo* info) {
  CompileInfo local;
  CompileInfo& inf = info != nullptr ? *info : local;
  inf = CompileInfo{};
  auto d = prepare_without_cache(request);
  if (!d) {
    return tl::unexpected(d.error());
  }
  const bool was_loaded = Toolkit::instance().is_loaded(d->library);
  auto a = run_derived(request, *d, &inf);
  inf.toolkit_loaded = !was_loaded && Toolkit::instance().is_loaded(d->library);
  return a;
}

Result<Artifact> compile(const CompileRequest& request, Store* cache, CompileInfo* info) {
  if (cache == nullptr || cache->disabled()) {
    return compile_without_cache(request, info);  // the user's compile, nothing around it
  }
  CompileInfo local;
  CompileInfo& inf = info != nullptr ? *info : local;
  inf = CompileInfo{};
  // Deriving the key may load a library too (its version not remembered yet).
  const auto loads_before = Toolkit::instance().load_count();
  // A family member's result (another kernel over the same tree) is taken
  // unchecked and checked once: after the lookup on a hit, after the compile
  // on a miss (run_derived()). Where the check after a hit fails, the key is
  // derived again, checked, and looked up again.
  Checks checks = Checks::deferred;
  Result<SharedDerived> shared = tl::unexpected(Error{});
  std::optional<Derived> own;  // a copy only where it must change: not cacheable, or compiled below
  Key key;
  for (;;) {
    const auto t0 = Clock::now();
    shared = derive_shared(request, checks);
    inf.key_us += micros_since(t0);
    if (!shared) {
      return tl::unexpected(shared.error());
    }
    own.reset();
    if (!(*shared)->not_cacheable.empty()) {
      own.emplace(**shared);
      make_unique_key(*own);
      cache = nullptr;
    }
    key = own ? own->key_value : (*shared)->key_value;
    inf.key = key;
    if (cache == nullptr) {
      break;
    }
    const auto t1 = Clock::now();
    auto got = cache->get(key);
    inf.lookup_us += micros_since(t1);
    if (!got) {
      inf.store_warning = "cache lookup failed: " + got.error().describe();
    } else if (*got) {
      Artifact& a = **got;
      // The store verified the payload against the passport; check the passport
      // answers this request too (a key collision is impossible, a bug is not).
      bool ok = a.passport.key == key && a.passport.kind == request.target_kind;
      for (const auto& e : request.name_expressions) {
        ok = ok && a.passport.symbols.contains(e);
      }
      if (ok && !shared->checked) {
        const auto t2 = Clock::now();
        const bool holds = jit::derivation_still_holds(**shared);
        inf.key_us += micros_since(t2);  // the check belongs to deriving the key
        if (!holds) {
          checks = Checks::now;
          continue;
        }
      }
      if (ok) {
        inf.headers = (*shared)->headers;  // shared: no copy of the list on a hit
        inf.hit = true;
        inf.toolkit_loaded = Toolkit::instance().load_count() != loads_before;
        return std::move(a);
      }
      inf.store_warning = "cache entry " + key.hex() + " does not match the request; recompiling";
    }
    break;
  }
  const ToolkitLibrary library = (*shared)->library;
  if (!own) {
    own.emplace(**shared);
  }
  const bool was_loaded = Toolkit::instance().is_loaded(library);
  auto a = run_derived(request, *own, &inf, shared->checked, /*switch_key=*/true);
  inf.headers = std::move(own->headers);  // the compiled tree's (one copy of the list per compile)
  inf.toolkit_loaded = (!was_loaded && Toolkit::instance().is_loaded(library)) ||
                       Toolkit::instance().load_count() != loads_before;
  if (!a) {
    return a;
  }
  if (inf.cacheable) {
    inf.key = a->passport.key;  // another key only where the tree changed before the compile (run_derived())
  }
  if (cache != nullptr && inf.cacheable) {
    const auto t2 = Clock::now();
    auto put = cache->put(*a);
    inf.store_us = micros_since(t2);
    if (put) {
      inf.stored = true;
      inf.store_queued = *put == PutOutcome::queued;
    } else {
      inf.store_warning = "could not store the result: " + put.error().describe();
    }
  }
  return a;
}

Result<void> check_cubin(std::string_view payload, std::string_view arch) {
  auto h = jit::read_cubin_header(payload);
  if (!h) {
    return tl::unexpected(h.error());
  }
  if (h->machine != jit::k_em_cuda) {
    return make_error(ErrorCode::corrupt,
                      "ELF e_machine is " + std::to_string(h->machine) + ", not 190 (EM_CUDA)");
  }
  const unsigned want = jit::arch_number(arch);
  if (want != 0 && h->sm != want) {
    return make_error(ErrorCode::corrupt, "cubin is for sm_" + std::to_string(h->sm) + " (e_flags 0x" +
                                              util::to_hex(reinterpret_cast<const std::uint8_t*>(&h->flags), 4) +
                                              "), not " + std::string(arch));
  }
  return {};
}

}  // namespace kcache
