// nvcc/header_state.hpp: what a compile read, and what must stay absent for
// it to read the same again (private).
//
// nvcc's dependency file lists every file the compile read (nvcc/
// dependency_file.hpp) but not the paths the preprocessor tried first and
// found missing. A header created at one of those paths later (a file named
// like a system header dropped into a `-I` directory, a new header beside the
// source) would be read instead, so the key must hold that those paths are
// still missing. absent_names() works them out as the preprocessor looks
// names up: every `#include`, `#include_next`, `#import` and `__has_include`
// of every file read (deps/directive_scanner.hpp, every conditional branch) is
// looked up in the includer's directory (a quoted name) and in every search
// directory; a pre-include in the working directory first. Where the path
// does not exist, the deepest existing directory on the way and the first
// name missing in it are recorded (`Y/sub` exists, `Y/sub/h.h` does not:
// ("Y/sub", "h.h")). A `__has_include` of a file that exists nowhere is
// recorded everywhere it was looked for. A computed include (`#include
// MACRO`) can name any header of the list: for the directory of a file that
// has one, and for every search directory, every name a header of the list
// has below a search directory or an includer's directory is looked up too.
// A search directory that does not exist is recorded as missing in its
// nearest existing parent. Paths are kept as spelled (a relative search
// directory stays relative), so the records mean the same wherever the
// compile runs from. The result is a superset of the lookups the
// preprocessor made: a file created at any recorded name makes the next
// lookup a miss, whether or not the compile would have read it.
//
// header_state() then gives the state a key holds: the SHA-256 of each
// header (or "missing"), and for each absent name whether it is still
// missing; its digest changes when any of them does.
//
// Not seen: a `__has_include` whose name is computed by a macro and names a
// file that exists nowhere (it is in no dependency file); documented in
// docs/nvcc.md.
//
// Thread-safety: functions without shared state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nvcc/file_stamp.hpp"

namespace kcache::nvcc {

struct AbsentName {
  std::string dir;   // an existing directory, as spelled
  std::string name;  // one path component that did not exist in it
  friend bool operator==(const AbsentName&, const AbsentName&) = default;
  friend auto operator<=>(const AbsentName&, const AbsentName&) = default;
};

// The names that must stay missing for `headers` (as the dependency file
// spells them, relative to the working directory or absolute) to be what a
// compile reads, given the search directories `search_dirs` (as spelled) and
// the pre-included names. `source` is the compile's input. Sorted and unique.
std::vector<AbsentName> absent_names(const std::vector<std::string>& headers, const std::string& source,
                                     const std::vector<std::string>& search_dirs,
                                     const std::vector<std::string>& pre_includes = {});

// True when `name` does not exist in `dir` (a path, base_dir expanded): the
// verdict header_state() keys for one absent name.
bool still_missing(const std::string& dir, const std::string& name);

// What was read of one header.
struct HeaderFile {
  std::string path;    // as spelled (base_dir expanded: a path to open)
  std::string keyed;   // as the key holds it (nvcc/path_rewrite.hpp); `path` without base_dir
  std::string sha256;  // 64 hex, or "missing"
  FileStamp stamp;     // zero when missing
};

struct HeaderState {
  std::vector<HeaderFile> headers;  // in the order of the list
  std::uint64_t present = 0;        // absent names that exist now
  std::string digest;               // 64 hex over every header's path and digest and every verdict
  std::string present_names;        // "dir/name" of each that exists now, newline-separated (for why-miss)
  // The latest FileStamp::settled_ns() of the headers read: a compile that
  // started after it read them as they are now.
  std::int64_t settled_ns = 0;
};

// Remembered digests: a header whose stamp equals the remembered one is not read again.
using KnownDigests = std::map<std::string, std::pair<FileStamp, std::string>>;

class PathRewrite;

// The state of `headers` and `absent` (as keyed: `rewrite` expands them to
// paths) now. `known`, when given, spares reading headers whose stamp is
// unchanged. The digest and the names in it are those of the keyed paths.
HeaderState header_state(const std::vector<std::string>& headers, const std::vector<AbsentName>& absent,
                         const PathRewrite& rewrite, const KnownDigests* known = nullptr);
// The same with paths as they are.
HeaderState header_state(const std::vector<std::string>& headers, const std::vector<AbsentName>& absent,
                         const KnownDigests* known = nullptr);

}  // namespace kcache::nvcc
