// compile/scan_inputs.hpp: the names under which header scans are
// remembered (private).
//
// A header manifest (compile/header_manifest.hpp) is named by the digest of
// everything a scan's result depends on besides the files and directories it
// records (manifest_key()). Scans over the same search path (working
// directory, -I list, toolkit) form a *family* (family_key()): whatever the
// source and the -D, they read mostly the same headers, so a scan with no
// manifest of its own takes the per-header facts (identity, SHA-256,
// directives) of the family's last manifest instead of reading every header
// again. The family's last manifest is named in
// `<memo dir>/<f0f1>/family-<family>` (format version 1, in the shard of the
// family digest, so the shard's caps bound it too):
//   file := "kcache-header-family 1\n" hex64 "\n"      (the manifest's name)
// Strictly read (exactly that, no symlink followed); anything else is no family.
//
// Thread-safety: the functions keep no state; they are thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "compile/header_manifest.hpp"
#include "compile/header_scanner.hpp"

namespace kcache::jit {

// 64 hex: the name of the manifest of `in`, scanned in working directory `cwd`.
std::string manifest_key(const ScanInput& in, const std::string& cwd);

// 32 hex: the family of `in` (working directory, -I list, toolkit).
std::string family_key(const ScanInput& in, const std::string& cwd);

// The name (64 hex) of the family's last manifest; empty when there is none,
// the file is malformed, or `memo_dir` is empty.
std::string family_manifest_name(const std::filesystem::path& memo_dir, const std::string& family);

// Names `m` the family's last manifest (best effort; nothing for a manifest
// without headers, or without a memo directory).
void note_family(const std::filesystem::path& memo_dir, const std::string& family, const HeaderManifest& m);

}  // namespace kcache::jit
