// deps/scan_directories.hpp: what one header scan learns about the
// directories its candidates lie in (private).
//
// A header scan (deps/header_scanner.hpp) tries each include name in every
// directory of the search path. For the header manifest it must record, for
// every candidate that is no header, the deepest existing directory on the
// path with its identity and the name that decided it (absent `n`, no regular
// file `x`, no directory `f`): adding that name later must make the manifest
// fail. ScanDirectories keeps those records, stats each directory once per
// scan, and answers most candidates from the directory's listing
// (deps/directory_listings.hpp) instead of a stat of the candidate path:
// over CuPy's tree that is about 245 000 failing stats per miss.
//
// Thread-safety: none; one per scan.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "deps/directory_listings.hpp"
#include "deps/header_manifest.hpp"

namespace kcache::jit {

// The directory part of `path` as the scan names it ("." for a bare name, "/" at the root).
std::string dir_of(const std::string& path);
// The last component of `path`.
std::string base_of(const std::string& path);

class ScanDirectories {
public:
  using Names = std::map<std::string, char>;  // name -> 'n' | 'x' | 'f'

  // `memo_dir`: where listings are shared (empty: memory only); `now_ns`: the
  // scan's start (identities changed since less than the racy window are
  // recorded as zero, which never matches).
  ScanDirectories(std::filesystem::path memo_dir, std::int64_t now_ns);

  // Records the identity of directory `dir`; its name record, or null when
  // `dir` is no directory.
  Names* note_dir(const std::string& dir);

  // Whether the listings decide that candidate `path`, whose part from `at`
  // on is the include name, is no file; it is then recorded exactly as
  // note_absent() records it (the deepest existing directory and the
  // component it lacks). False when the last component exists (the caller
  // stats the path) or the listings cannot tell (a component that is empty,
  // "." or "..", or that exists but is no readable directory).
  bool absent_by_listing(const std::string& path, std::size_t at);

  // Records that existing directory `dir` lacks `name` (one component), as
  // absent_by_listing() does for a candidate whose first component is missing.
  void note_missing(const std::string& dir, const std::string& name);

  // `path` is no regular file: records what decides so (by stat'ing it and its parents).
  void note_absent(const std::string& path);

  // Records directory `dir`, or what decides that it is none.
  void note_dir_or_ancestor(const std::string& dir);

  // The names in directory `dir`; null when it is no directory or cannot be read.
  const DirectoryListing* listing_of(const std::string& dir);

  // Every directory recorded, sorted by path, for the manifest.
  std::vector<ManifestDir> records() const;

private:
  struct State {
    bool is_dir = false;
    bool listed = false;
    bool changed = false;  // its listing belongs to another identity than `st`: not trusted
    struct stat st {};
    std::shared_ptr<const DirectoryListing> listing;
  };
  State& state(const std::string& dir);

  std::filesystem::path m_memo_dir;
  std::int64_t m_now;
  std::map<std::string, std::pair<FileStamp, Names>> m_records;
  std::unordered_map<std::string, State> m_states;
};

}  // namespace kcache::jit
