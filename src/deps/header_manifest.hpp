// deps/header_manifest.hpp: what a header scan found and what it depends
// on, kept so that the next scan of the same inputs only re-checks file
// identities (private).
//
// A manifest (in the spirit of ccache's direct mode) is named by the digest
// of the scan's inputs (deps/header_scanner.hpp: source, program name,
// working directory, include path, definitions, toolkit) and holds:
//   - every disk header the scan put into the key, with its stat identity
//     (device, inode, size, mtime, ctime) and SHA-256;
//   - every directory whose content decided that a candidate path did NOT
//     exist or did not count (the deepest existing directory on the path),
//     with its stat identity and the names in it that decided so: while the
//     identity is unchanged nothing was added or removed there; when it
//     changed (an output file written beside the source, an editor's backup)
//     the directory is listed and the manifest still applies if each name is
//     as it was (absent; not a regular file; not a directory);
//   - the verdict (not cacheable, and why), if any;
//   - per header, the directives it holds (includes, computed includes,
//     #defines), so that a rescan after one header changed re-reads only that one.
// The manifest applies while every recorded identity is unchanged (stat
// follows symlinks, as the compiler's open does). Identities that are too
// recent to be trusted (racy: changed within k_racy_window_ns of the scan)
// are recorded as zero (a directory's keeps its device and inode, with zero
// size and times), which never matches: a file written twice within one
// timestamp tick would otherwise look unchanged (a racy directory is then
// always judged by its names, a racy header always re-read). A directory
// recorded with no names (nothing was looked up in it: an include directory
// of a source that includes nothing from it) applies while the path names
// the same directory (device and inode), whatever its content.
//
// On disk (`<memo dir>/<k0k1>/<key>`, format version 5; strictly parsed,
// at most k_max_manifest_bytes, anything else is ignored):
//   manifest  := "kcache-header-manifest 5 " count "\n" identity "details\n" fact* "end\n"
//   count     := the length in bytes of identity (decimal): a lookup reads the
//                first line, then exactly identity and "details\n", and none
//                of the facts (over CuPy's tree: 370 KB of a 1.1 MB file)
//   identity  := "input " hex64 "\n" "list " hex64 "\n" header* dir* verdict?
//                seen? doubt? fm* "names " len "\n" block
//   list      := header_list_digest() of the headers below, as written: a hit
//                keys them without hashing their ~170 KB of paths and digests
//                again (trusted as the header records themselves are)
//   header    := "header " stamp " " hex64 " " str "\n"
//   dir       := "dir " stamp " " str " " at " " len "\n"
//                its name records are block[at, at + len); the ranges of the
//                dirs tile the block in order (the first at 0)
//   verdict   := "nc " str "\n"
//   seen      := "seen " str "\n"   why the program name's directory can reach
//                the output (deps/name_directory.hpp); absent: it cannot
//                through the closure alone
//   doubt     := "doubt " str "\n"  why it may (only evidence decides:
//                deps/name_directory.hpp); only without "seen"
//   fm        := "fm " str "\n"     a macro of the closure that may expand
//                __FILE__ (sorted, unique); only without "seen"
//   block     := (("n" | "x" | "f") " " str "\n")*    sorted, unique per dir
//                n: the name must not exist; x: must not be a regular file;
//                f: must not be a directory
//   (A lookup keeps the block unparsed and reads a directory's records only
//   when its identity changed: over CuPy's tree they are ~6 700 records that
//   a hit, whose directories are unchanged, never needs. Version 1 kept them
//   inline, each parsed on every hit; version 2 had no count, so a lookup
//   read the whole file; version 3 had no "seen" nor "loc"; version 4 had
//   no "doubt" and kept its facts in "seen".)
//   fact      := "fact " str "\n" "loc\n"? (inc | def)*   one per header, same order;
//                "loc": FileDirectives::names_main_file
//   inc       := "inc " ("a" | "q" | "c") " " str "\n"  angled, quoted, computed
//   def       := "def " ("f" | "o") " " str " " str " " str "\n"   name params body
//   stamp     := dev " " ino " " size " " mtime_ns " " ctime_ns   (decimal)
//   str       := length ":" bytes                                   (length decimal)
// Written atomically (temporary + rename), mode 0600. Each shard keeps at
// most k_max_shard_files manifests and k_max_shard_bytes; older ones are
// removed when a new one is written.
//
// Thread-safety: the functions keep no state; they are thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deps/directive_scanner.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

// The stat identity of a file or directory.
struct FileStamp {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::int64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const struct stat& st);

// Whether `s` changed so recently (relative to `now_ns`) that a later change
// might keep the same identity.
bool is_racy(const FileStamp& s, std::int64_t now_ns);

inline constexpr std::int64_t k_racy_window_ns = 2'000'000'000;
inline constexpr std::size_t k_max_manifest_bytes = 4u << 20;
inline constexpr std::size_t k_max_shard_files = 32;
inline constexpr std::size_t k_max_shard_bytes = 8u << 20;

struct ManifestHeader {
  std::string path;
  FileStamp stamp;
  std::string sha256;
  FileDirectives directives;
};

struct ManifestDir {
  std::string path;
  FileStamp stamp;
  // What each name in the directory must stay: 'n' absent, 'x' no regular
  // file, 'f' no directory. Sorted by name, unique.
  std::vector<std::pair<std::string, char>> names;
};

// Adds one (path, SHA-256 hex) pair to `list` as the key's "disk_headers"
// field takes it (compile/request_keys.cpp): the path's length (8 bytes, host
// order), the path, the hex digest.
void add_to_header_list(util::Sha256& list, std::string_view path, std::string_view sha256_hex);

// 64 hex: the "disk_headers" digest of `headers` in their order, paths as they are.
std::string header_list_digest(const std::vector<ManifestHeader>& headers);

struct HeaderManifest {
  std::string input;  // 64 hex: the digest of the scan inputs
  std::string list;   // 64 hex: header_list_digest(headers)
  std::vector<ManifestHeader> headers;
  std::vector<ManifestDir> dirs;
  std::string not_cacheable;
  // Why the program name's directory can reach NVRTC's output through the
  // closure (a quoted include of the source, `__FILE__` ...:
  // deps/name_directory.hpp); empty when it cannot.
  std::string name_directory_seen;
  // With name_directory_seen empty: why it may (only evidence decides,
  // NameDirectoryCheck::doubt()); empty when it cannot.
  std::string name_directory_doubt;
  // With name_directory_seen empty: the macros of the closure's files that
  // may expand `__FILE__`, sorted (NameDirectoryCheck::file_macros()).
  std::vector<std::string> file_macros;
  // From a scan only (not stored): every identifier its computed includes
  // looked up, sorted, unique (deps/scan_inputs.hpp: the family's roots).
  std::vector<std::string> looked_up;
  bool has_details = true;  // false: parsed with ManifestPart::lookup (no directives, no dirs[].names)
  // With has_details false: the unparsed name records (a view into
  // `names_text`, possibly within a longer text: the whole part a lookup
  // read, kept as read, never copied or zero-filled), and each dir's range in
  // `names_block`.
  std::string_view names_block;
  std::shared_ptr<const char[]> names_text;
  std::vector<std::pair<std::size_t, std::size_t>> name_ranges;
};

// Whether `m` records nothing a later scan could use: no header, no
// directory, no verdict, nothing about the program name, nothing looked up
// (a source that includes nothing, compiled without -I). Such a manifest is
// not written: a scan of the source alone costs less than writing and
// reading it (deps/header_scanner.cpp). Names every field a scan fills.
inline bool records_nothing(const HeaderManifest& m) {
  return m.headers.empty() && m.dirs.empty() && m.not_cacheable.empty() && m.name_directory_seen.empty() &&
         m.name_directory_doubt.empty() && m.file_macros.empty() && m.looked_up.empty();
}

// Whether every identity recorded in `m` is still the same on disk (a
// directory whose identity changed still applies when its names are as
// recorded). `trusted_dirs`, when given, has one flag per dir of `m`: a
// flagged directory is not checked (deps/header_scanner.hpp, reuse_checks()).
// Directories are resolved relative to an already opened directory above
// them where there is one (the same resolution as the whole path's, with
// fewer components walked), and each header relative to its directory.
// `refreshed`, when given, gets each directory whose identity changed but whose
// names still hold, with the identity it has now, where that identity is not
// racy and is the same before and after its names were looked at (nothing
// changed there in between): a copy of `m` with those identities
// (with_refreshed_dirs()) applies again by one stat of the directory, not a
// listing or a lookup of each name on every later check.
struct RefreshedDir {
  std::size_t index = 0;  // in m.dirs
  FileStamp stamp;
};
bool manifest_still_applies(const HeaderManifest& m, const std::vector<bool>* trusted_dirs = nullptr,
                            std::vector<RefreshedDir>* refreshed = nullptr);

// A copy of `m` with the directory identities of `refreshed`.
HeaderManifest with_refreshed_dirs(const HeaderManifest& m, const std::vector<RefreshedDir>& refreshed);

// `m` when it still applies (manifest_still_applies()); the copy with the
// identities its directories have now when some were judged by their names,
// so that later checks stat them again instead; null when it does not apply.
std::shared_ptr<const HeaderManifest> still_applying(std::shared_ptr<const HeaderManifest> m,
                                                     const std::vector<bool>* trusted_dirs = nullptr);

// How a directory whose identity changed is judged by its names: a lookup of
// each recorded name (what the compiler itself does), or one listing of the
// directory. Both give the same verdict. A lookup costs one system call, a
// listing ~4 plus one per ~1 000 entries read, and a directory's size in
// bytes is about 20-32 per entry (ext4, tmpfs, btrfs); so a check looks each
// name up where there are at most k_names_looked_up of them or at most the
// directory's size / k_dir_bytes_per_lookup (a build's working directory of
// 5 000 files and its handful of names), and lists it otherwise.
enum class NameCheck { each_name, listing };
inline constexpr std::size_t k_names_looked_up = 8;
inline constexpr std::size_t k_dir_bytes_per_lookup = 512;

// Whether every recorded name of directory `dir` is still as recorded ('n':
// no entry of that name, a dangling symbolic link included; 'x': does not
// resolve to a regular file; 'f': does not resolve to a directory); false
// when `names` is empty or the directory cannot be opened (searched, for
// each_name; read, for listing).
bool names_still_apply(const char* dir, const std::vector<std::pair<std::string, char>>& names, NameCheck how);

// A directory's name records (`block`: its part of a manifest's names block,
// "n|x|f" " " str "\n" each); nothing when they are malformed or not sorted
// and unique.
std::optional<std::vector<std::pair<std::string, char>>> parse_manifest_names(std::string_view block);

// How many directories names_still_apply() listed in this process; for tests.
std::uint64_t manifest_dir_listings();

// What a derivation re-checks within this process for a manifest's result to
// hold again: the manifest (shared, not copied) without the directories
// `trusted_dirs` flags.
struct ManifestChecks {
  std::shared_ptr<const HeaderManifest> manifest;
  std::vector<bool> trusted_dirs;  // one per manifest->dirs
};

inline bool checks_still_apply(const ManifestChecks& c) {
  return manifest_still_applies(*c.manifest, &c.trusted_dirs);
}

// How many times manifest_still_applies() ran in this process (each call
// stats the manifest's headers and directories once); for tests that count
// the checks of one compile.
std::uint64_t manifest_checks_run();

// The system calls (stats and directory opens) those checks made in all; for
// tests that bound what one check costs.
std::uint64_t manifest_check_calls();

// Whether every header and directory of `m` has exactly its recorded identity
// now, each older than the racy window before `since_ns` (CLOCK_REALTIME): then
// nothing in `m` changed after `since_ns - k_racy_window_ns`, so a compile that
// started at `since_ns` read exactly the files `m` describes. Stats each path
// (a directory whose identity changed fails, whatever its names). For the rare
// compile whose deferred check failed (compile/compiler.cpp).
bool manifest_unchanged_since(const HeaderManifest& m, std::int64_t since_ns);

std::string serialize_manifest(const HeaderManifest& m);

// Whether a parse reads the per-header directives too (a rescan needs them,
// a lookup does not: they are most of the text).
enum class ManifestPart { lookup, with_details };

// Parses `text`; nothing when it is not exactly a version-3 manifest for
// `input` (with ManifestPart::lookup, the part after "details" is not read:
// `text` may end there).
std::optional<HeaderManifest> parse_manifest(std::string_view text, std::string_view input,
                                             ManifestPart part = ManifestPart::with_details);

// Reads the manifest for `input` under `dir` (with ManifestPart::lookup, only
// its first line, identity and "details" line: the file must be longer than
// that); nothing when absent, too big or malformed.
std::optional<HeaderManifest> load_manifest(const std::filesystem::path& dir, const std::string& input,
                                            ManifestPart part = ManifestPart::with_details);

// Writes `m` under `dir` (best effort: a failure only loses the memo).
void store_manifest(const std::filesystem::path& dir, const HeaderManifest& m);

}  // namespace kcache::jit
