// deps/scan_memos.hpp: what header scans remember for the life of the process (private).
//
// Three memos, shared by every scan in the process and locked together:
//  - per-file facts (identity, SHA-256, directives) by path, only for
//    identities that were not racy (deps/closure_scan.hpp fills it);
//  - header manifests by name (deps/header_scanner.cpp);
//  - canonical directories by the name they were asked under.
// The first two are bounded: one that reaches its cap is emptied.
//
// Thread-safety: every function here is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "deps/header_manifest.hpp"

namespace kcache::jit {

// Per-file facts; shared, immutable: a scan and the memo hold the same facts
// without copying their directives.
using Facts = std::shared_ptr<const ManifestHeader>;

// The facts remembered for `path` when their identity is `stamp`; null otherwise.
Facts remembered_facts(const std::string& path, const FileStamp& stamp);

// Remembers `facts` under its path (the caller checked its identity is not racy).
void remember_facts(const Facts& facts);

// The manifest remembered under `name`; null when there is none.
std::shared_ptr<const HeaderManifest> remembered_manifest(const std::string& name);

// Remembers `m` under `name`.
void remember_manifest(const std::string& name, std::shared_ptr<const HeaderManifest> m);

// Empties the facts and manifest memos (canonical directories are kept, like
// the toolkit they name).
void forget_facts_and_manifests();

// `dir` made canonical (symlinks resolved; "" is "."), remembered for the life
// of the process; `dir` itself when it cannot be resolved.
std::string canonical_dir(const std::string& dir);

// Whether `path` is strictly below directory `root` (false for an empty root).
bool under(const std::string& path, const std::string& root);

}  // namespace kcache::jit
