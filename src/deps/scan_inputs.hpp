// deps/scan_inputs.hpp: the names under which header scans are
// remembered (private).
//
// A header manifest (deps/header_manifest.hpp) is named by the digest of
// everything a scan's result depends on besides the files and directories it
// records (manifest_key()). Scans over the same search path (working
// directory, -I list, toolkit) form a *family* (family_key()): whatever the
// source and the -D, they read mostly the same headers, so a scan with no
// manifest of its own takes the per-header facts (identity, SHA-256,
// directives) of the family's last manifest instead of reading every header
// again.
//
// A family also names the manifests of its recent scans by their *roots*
// (roots_key()): what a scan's result depends on besides the search path and
// the files and directories its manifest records. Those are the source's
// include directives and the #defines a computed include looked up, the
// pre-includes, the in-memory headers, the directories of the program name
// and source path, the -D of identifiers a computed include looked up, and
// NVRTC's predefined context when the scan used it. A scan's closure is a
// function of these alone: directives are scanned in every branch, and a
// macro definition reaches the result only through a computed include's
// expansion, which looks up exactly the identifiers the manifest notes (the
// expansion, the predefined asks and the fixed point never consult another).
// So another kernel over the same tree (another body, another -D of a name
// no computed include uses) whose roots equal a family member's takes that
// manifest's result after checking that it still applies, as a hit does: no
// walk, no manifest written. Members whose scan was not cacheable are not noted.
//
// `<memo dir>/<f0f1>/family-<family>` (format version 2, in the shard of the
// family digest, so the shard's caps bound it too; newest member first, at
// most k_max_family_members):
//   file   := "kcache-header-family 2\n" member* "end\n"
//   member := "m " hex64 " " hex64 " " count "\n" ("i " str "\n"){count}
//             the manifest's name, its roots, the identifiers its computed
//             includes looked up (sorted, unique)
//   str    := length ":" bytes
// Strictly read (at most k_max_family_bytes, no symlink followed); anything
// else is no family.
//
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "deps/header_manifest.hpp"
#include "deps/header_scanner.hpp"

namespace kcache::jit {

// 64 hex: the name of the manifest of `in`, scanned in working directory `cwd`.
std::string manifest_key(const ScanInput& in, const std::string& cwd);

// 32 hex: the family of `in` (working directory, -I list, toolkit).
std::string family_key(const ScanInput& in, const std::string& cwd);

struct FamilyMember {
  std::string manifest;                  // 64 hex
  std::string roots;                     // 64 hex: roots_key() when it was noted
  std::vector<std::string> identifiers;  // looked up by its computed includes, sorted
};

inline constexpr std::size_t k_max_family_members = 8;
inline constexpr std::size_t k_max_family_bytes = 256u << 10;

// The family's members, newest first; empty when there are none, the file is
// malformed, or `memo_dir` is empty.
std::vector<FamilyMember> family_members(const std::filesystem::path& memo_dir, const std::string& family);

// 64 hex: the roots of `in` (its source's directives `source`) as a member
// whose computed includes looked up `identifiers` sees them. `predefined_id`:
// NVRTC's predefined context when the scan uses it, else empty.
std::string roots_key(const ScanInput& in, const FileDirectives& source, const std::vector<std::string>& identifiers,
                      const std::string& predefined_id);

// Notes `m` (scanned with roots `roots`) as the family's newest member (best
// effort; nothing for a manifest without headers or not cacheable, or without
// a memo directory). Members with the same manifest or roots are replaced.
void note_family(const std::filesystem::path& memo_dir, const std::string& family, const HeaderManifest& m,
                 const std::string& roots);

}  // namespace kcache::jit
