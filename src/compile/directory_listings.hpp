// compile/directory_listings.hpp: remembered directory listings, so that a
// header scan decides "this name is not in that directory" by a lookup
// instead of a failing stat (private).
//
// A header scan tries every include name in every directory of the search
// path (compile/header_scanner.hpp); over a large tree (CuPy's headers and
// their CCCL, five include directories) nearly all of those candidates do not
// exist, and stat'ing each cost a miss 0.75-1 s. A listing is remembered per
// directory identity (device, inode, size, mtime and ctime in ns: any entry
// added, removed or renamed changes mtime and ctime), so a scan stats each
// directory it looks into once and answers the names from its listing.
//
// A listing is remembered only when it is consistent and old enough: the
// directory's identity was the same before and after reading it, and it had
// not changed within k_racy_window_ns of the scan's start (a second change in
// the same timestamp tick could keep the identity). A younger directory is
// read again by every scan until it is older.
//
// Listings live in memory (per process) and in `<memo dir>/listings`
// (`$KCACHE_DIR/v1/headers/listings`), shared by every process using the
// cache directory. The file is untrusted: read without following a symlink,
// at most k_max_listings_bytes, strictly parsed; any deviation and it is
// ignored as a whole (and replaced by the next save). Format version 1:
//   file    := "kcache-dir-listings 1\n" listing* "end\n"
//   listing := "dir " stamp " " count "\n" (str "\n"){count}
//   stamp   := dev " " ino " " size " " mtime_ns " " ctime_ns   (decimal)
//   str     := length ":" bytes          (a name: not empty, no '/' or NUL,
//                                         not "." or ".."; sorted, unique)
// Oldest first; a save appends this process's new listings to what the file
// holds then (another process's additions are kept), drops the oldest to stay
// within k_max_listings and k_max_listings_bytes, and writes it atomically
// (temporary + rename, mode 0600). Two processes saving at once may lose one
// another's additions: they are read again next time, nothing is wrong.
//
// Thread-safety: every function is thread-safe (one mutex).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compile/header_manifest.hpp"

namespace kcache::jit {

inline constexpr std::size_t k_max_listings = 20000;
inline constexpr std::size_t k_max_listings_bytes = 8u << 20;
inline constexpr std::size_t k_max_listing_names = 100000;

struct DirectoryListing {
  FileStamp stamp;                 // the identity the names belong to
  std::vector<std::string> names;  // sorted, unique, without "." and ".."
  bool contains(std::string_view name) const;
};

// The listing of directory `path`, whose `stat` (following symlinks, as the
// compiler's open does) returned `st`: remembered when its identity is
// `stamp_of(st)`, else read now. The returned listing's stamp is the identity
// the names belong to: not `stamp_of(st)` when the directory changed after
// `st` was taken (the caller must then not trust `st`). Null when the
// directory cannot be read (permissions, removed). `memo_dir` empty: memory
// only. `now_ns`: the scan's start, for the racy window.
std::shared_ptr<const DirectoryListing> directory_listing(const std::string& path, const struct stat& st,
                                                          const std::filesystem::path& memo_dir,
                                                          std::int64_t now_ns);

// Writes the listings read in this process since the last save to
// `<memo_dir>/listings` (best effort: a failure only loses the memo).
void save_directory_listings(const std::filesystem::path& memo_dir);

// Forgets the in-process listings (the file is read again on next use); for tests and benchmarks.
void forget_directory_listings();

// The text of a listings file, and its parse (nothing when it is not exactly a version-1 file).
std::string serialize_directory_listings(const std::vector<DirectoryListing>& listings);
std::optional<std::vector<DirectoryListing>> parse_directory_listings(std::string_view text);

}  // namespace kcache::jit
