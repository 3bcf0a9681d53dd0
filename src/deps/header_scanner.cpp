#include "deps/header_scanner.hpp"

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "deps/closure_scan.hpp"
#include "deps/derivation_memo.hpp"
#include "deps/directory_listings.hpp"
#include "deps/header_manifest.hpp"
#include "deps/scan_inputs.hpp"
#include "deps/scan_memos.hpp"
#include "deps/working_directory.hpp"
#include "util/sha256.hpp"
#include "util/single_threaded.hpp"

namespace kcache::jit {

namespace {

ScanResult result_of(const std::shared_ptr<const HeaderManifest>& shared, bool reused) {
  const HeaderManifest& m = *shared;
  ScanResult r;
  r.not_cacheable = m.not_cacheable;
  r.name_directory_seen = m.name_directory_seen;
  r.name_directory_doubt = m.name_directory_doubt;
  r.file_macros = m.file_macros;
  r.reused = reused;
  r.headers_list = m.list;
  // Made from the manifest (kept alive by the list) only when read: a large
  // tree keys by `headers_list` and its size, so a hit whose caller never
  // reads the list copies none of its ~2 strings per header.
  r.headers = HeaderList(m.headers.size(), [shared] {
    std::vector<HeaderDependency> list;
    list.reserve(shared->headers.size());
    for (const auto& h : shared->headers) {
      list.emplace_back(h.path, h.sha256);
    }
    return list;
  });
  return r;
}

// The per-user copy of the manifests and families (deps/user_memo.hpp):
// a new cache directory takes what another one of the user's found, under the
// same checks (manifest_still_applies()). Empty when there is none.
std::filesystem::path user_headers_dir(const ScanInput& input) {
  return input.user_memo_dir.empty() || input.memo_dir.empty() ? std::filesystem::path()
                                                                : input.user_memo_dir / "headers";
}

// Manifest `name` from the cache directory, else from the user's copy.
std::optional<HeaderManifest> load_either(const ScanInput& input, const std::string& name, ManifestPart part) {
  auto m = load_manifest(input.memo_dir, name, part);
  if (const auto user = user_headers_dir(input); !m && !user.empty()) {
    m = load_manifest(user, name, part);
  }
  return m;
}

// What the scans of one request share: its names, and the family's members
// and the source's directives, each read on first use.
struct Request {
  const ScanInput& input;
  std::string cwd;
  std::string family;
  std::optional<std::vector<FamilyMember>> members;
  std::optional<FileDirectives> source;
  // The files of a scan written on a thread of their own (scan_with_manifest()).
  std::future<void> writing;

  const std::vector<FamilyMember>& members_of_family() {
    if (!members) {
      // The cache directory's members; the user's only where it has none (a
      // new cache directory for this search path): a warm directory's hit
      // reads no more files than before.
      members = family_members(input.memo_dir, family);
      if (const auto user = user_headers_dir(input); members->empty() && !user.empty()) {
        members = family_members(user, family);
      }
    }
    return *members;
  }
  const FileDirectives& source_directives() {
    if (!source) {
      source = scan_file(input.source);
    }
    return *source;
  }
  std::string predefined_id(bool with_predefined) const {
    return with_predefined && input.predefined != nullptr ? input.predefined->id : std::string();
  }
};

// The result of manifest `name` when it is remembered (in this process or on
// disk) and still applies, remembered under `key` too; nothing otherwise
// (nothing is scanned or written).
// With `defer`, a manifest whose identities are all trusted (none racy) is
// taken unchecked: the result says so (ScanResult::checked) and is not
// remembered under `key`.
std::optional<ScanResult> reuse_manifest(const ScanInput& input, const std::string& name, const std::string& key,
                                         std::shared_ptr<const HeaderManifest>& used, bool defer = false) {
  std::shared_ptr<const HeaderManifest> m = remembered_manifest(name);
  if (!m) {
    if (auto loaded = load_either(input, name, ManifestPart::lookup)) {
      m = std::make_shared<const HeaderManifest>(std::move(*loaded));
    }
  }
  if (m && defer && std::none_of(m->headers.begin(), m->headers.end(),
                                 [](const ManifestHeader& h) { return h.stamp == FileStamp{}; })) {
    used = m;
    ScanResult r = result_of(m, true);
    r.checked = false;
    return r;
  }
  if (!m || !(m = still_applying(std::move(m)))) {
    return std::nullopt;  // scan_with_manifest() reads it whole when it must
  }
  remember_manifest(name, m);
  if (key != name) {
    remember_manifest(key, m);
  }
  used = m;
  return result_of(m, true);
}

// The result of a family member with the same roots as `req` whose manifest
// still applies (deps/scan_inputs.hpp: that is this scan's result).
std::optional<ScanResult> reuse_family(Request& req, const std::string& key, std::shared_ptr<const HeaderManifest>& used,
                                       bool with_predefined) {
  for (const auto& member : req.members_of_family()) {
    if (roots_key(req.input, req.source_directives(), member.identifiers, req.predefined_id(with_predefined)) ==
        member.roots) {
      // Deferred only where the later check can run (it needs the working directory).
      if (auto r = reuse_manifest(req.input, member.manifest, key, used,
                                  req.input.defer_member_checks && !req.cwd.empty())) {
        return r;
      }
    }
  }
  return std::nullopt;
}

Result<ScanResult> scan_with_manifest(Request& req, const std::string& key, std::shared_ptr<const HeaderManifest>& used,
                                      bool with_predefined) {
  const ScanInput& input = req.input;
  std::shared_ptr<const HeaderManifest> previous = remembered_manifest(key);
  if (previous) {
    if (auto now = still_applying(previous)) {
      if (now != previous) {
        remember_manifest(key, now);
      }
      used = now;
      return result_of(now, true);
    }
  }
  if (previous && !previous->has_details) {
    previous.reset();
    if (auto full = load_either(input, key, ManifestPart::with_details)) {
      previous = std::make_shared<const HeaderManifest>(std::move(*full));
    }
  } else if (!previous) {
    if (auto m = load_either(input, key, ManifestPart::lookup)) {
      if (auto shared = still_applying(std::make_shared<const HeaderManifest>(std::move(*m)))) {
        remember_manifest(key, shared);
        used = shared;
        return result_of(shared, true);
      }
      // Out of date: its per-header facts still spare re-reading the headers that did not change.
      if (auto full = load_either(input, key, ManifestPart::with_details)) {
        previous = std::make_shared<const HeaderManifest>(std::move(*full));
      }
    } else if (auto r = reuse_family(req, key, used, with_predefined)) {
      return std::move(*r);  // another kernel over the same tree, with the same roots
    }
  }
  if (!previous && !req.members_of_family().empty()) {
    // No manifest for these inputs (another -D, another kernel over the same
    // tree): the family's newest lends its per-header facts, so a header
    // whose identity is unchanged is not read again.
    const std::string& name = req.members_of_family().front().manifest;
    if (auto m = remembered_manifest(name); m && m->has_details) {
      previous = std::move(m);  // written or read by this process: not parsed again
    }
    if (!previous) {
      if (auto full = load_either(input, name, ManifestPart::with_details)) {
        previous = std::make_shared<const HeaderManifest>(std::move(*full));
      }
    }
  }
  auto scanned = scan_closure(input, previous.get(), with_predefined);
  if (!scanned) {
    return tl::unexpected(scanned.error());
  }
  HeaderManifest& m = *scanned;
  m.input = key;
  m.list = header_list_digest(m.headers);
  // Kept even when some identity was too recent to trust: it is recorded as
  // zero, so such a header is re-read next time, and the others are not.
  auto shared = std::make_shared<const HeaderManifest>(std::move(m));
  ScanResult result = result_of(shared, false);
  if (req.writing.valid()) {
    req.writing.wait();  // the scan before this one's: its files first
  }
  // A scan that ends for want of NVRTC's predefined macros is followed by
  // one with them (scan_headers()): its manifest (a note that it needs them,
  // in no family) and the directory listings are written on a thread of
  // their own while that scan runs, where the process has threads already
  // (util/single_threaded.hpp; a first use's toolkit read ahead is one).
  const bool followed = !with_predefined && input.predefined != nullptr &&
                        shared->not_cacheable.rfind(k_needs_predefined, 0) == 0 &&
                        !util::process_is_single_threaded();
  std::vector<std::filesystem::path> manifest_dirs;
  if (!input.memo_dir.empty() && !records_nothing(*shared)) {
    const std::string roots =
        roots_key(input, req.source_directives(), shared->looked_up, req.predefined_id(with_predefined));
    for (const auto& dir : {input.memo_dir, user_headers_dir(input)}) {
      if (!dir.empty()) {
        if (followed) {
          manifest_dirs.push_back(dir);  // note_family() keeps no manifest that is not cacheable
          continue;
        }
        store_manifest(dir, *shared);
        note_family(dir, req.family, *shared, roots);
      }
    }
    req.members.reset();  // read again when asked
  }
  auto write = [shared, manifest_dirs, listings = listings_dir(input)] {
    for (const auto& dir : manifest_dirs) {
      store_manifest(dir, *shared);
    }
    save_directory_listings(listings);
  };
  if (followed) {
    try {
      req.writing = std::async(std::launch::async, write);
    } catch (const std::system_error&) {
      write();  // no thread to be had
    }
  } else {
    write();
  }
  remember_manifest(key, shared);
  used = shared;
  return result;
}

// What a later derivation in this process re-checks for `r` to hold.
void finish(ScanResult& r, const std::shared_ptr<const HeaderManifest>& used, const ScanInput& input,
            const std::string& cwd) {
  if (used && !cwd.empty()) {
    r.checks = reuse_checks(used, input.toolkit_root.string());
    r.working_directory = cwd;
  }
}

}  // namespace

Result<ScanResult> scan_headers(const ScanInput& input) {
  Request req{input, current_directory(), {}, std::nullopt, std::nullopt, {}};
  req.family = family_key(input, req.cwd);
  std::shared_ptr<const HeaderManifest> used;
  const std::string key = manifest_key(input, req.cwd);
  const std::string with_predefined_key =
      input.predefined == nullptr ? std::string() : util::sha256_hex(key + "\npredefined\n" + input.predefined->id);
  if (!with_predefined_key.empty()) {
    // A scan with what NVRTC predefines is right whether or not the scan
    // without needs it (it asks only for identifiers a computed include looked
    // up): where such a manifest, or a family member's with the same roots,
    // still applies it decides alone, and a hit over a tree like CuPy's checks
    // one manifest, not two.
    auto r = reuse_manifest(input, with_predefined_key, with_predefined_key, used);
    if (!r) {
      r = reuse_family(req, with_predefined_key, used, true);
    }
    if (r) {
      finish(*r, used, input, req.cwd);
      return std::move(*r);
    }
  }
  auto result = scan_with_manifest(req, key, used, false);
  if (result && result->not_cacheable.rfind(k_needs_predefined, 0) == 0) {
    // The result depends on what NVRTC predefines for these options: it is
    // kept under a manifest named by the predefined context too.
    if (input.predefined == nullptr) {
      result->not_cacheable.erase(0, k_needs_predefined.size());
      return result;
    }
    used.reset();
    result = scan_with_manifest(req, with_predefined_key, used, true);
  }
  if (result) {
    finish(*result, used, input, req.cwd);
  }
  return result;
}

std::shared_ptr<const ManifestChecks> reuse_checks(const std::shared_ptr<const HeaderManifest>& m,
                                                   const std::string& toolkit_root) {
  for (const auto& h : m->headers) {
    if (h.stamp == FileStamp{}) {
      return nullptr;
    }
  }
  auto checks = std::make_shared<ManifestChecks>();
  checks->manifest = m;
  checks->trusted_dirs.reserve(m->dirs.size());
  for (const auto& d : m->dirs) {
    // A relative directory moves with the working directory: always checked.
    // A path not spelled under the root is checked too, even where a symlink
    // leads it into the toolkit (more checks, never fewer): that spares
    // resolving each of the hundreds of directories a large tree records.
    const bool in_toolkit = !toolkit_root.empty() && !d.path.empty() && d.path.front() == '/' &&
                            (d.path == toolkit_root || under(d.path, toolkit_root)) && [&] {
                              const auto c = canonical_dir(d.path);
                              return c == toolkit_root || under(c, toolkit_root);
                            }();
    checks->trusted_dirs.push_back(in_toolkit);
  }
  return checks;
}

std::string canonical_path(const std::string& path) {
  return canonical_dir(path);
}

void forget_scan_memos() {
  forget_facts_and_manifests();
  forget_directory_listings();
  DerivationMemo::instance().clear();
}

}  // namespace kcache::jit
