// deps/directory_listings.hpp: remembered directory listings, so that a
// header scan decides "this name is not in that directory" by a lookup
// instead of a failing stat (private).
//
// A header scan tries every include name in every directory of the search
// path (deps/header_scanner.hpp); over a large tree (CuPy's headers and
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
// Listings live in memory (per process) and on disk, ONE FILE PER DIRECTORY
// (device, inode) under `<memo dir>/listings.2/` (per user:
// `$XDG_CACHE_HOME/kcache-toolkit/listings.2/`), shared by every process
// using that memo dir. A lookup reads only the file of the directory asked
// for, so its cost does not grow with the number of listings remembered (the
// version-1 layout was one file of every listing, parsed whole by the first
// lookup of each process: 5-7 ms once it held a few thousand). Layout:
//   listings.2/<s0s1>/<dev>-<ino>    s0s1 = listing_shard(dev, ino), 2 hex
// Each file is untrusted: opened without following a symlink, at most
// k_max_listing_file_bytes, strictly parsed, and believed only when it holds
// exactly one listing whose device and inode are those of its name; any
// deviation and it is ignored (and replaced by the next save). Format
// version 2:
//   file    := "kcache-dir-listing 2\n" listing "end\n"
//   listing := "dir " stamp " " count "\n" (str "\n"){count}
//   stamp   := dev " " ino " " size " " mtime_ns " " ctime_ns   (decimal)
//   str     := length ":" bytes          (a name: not empty, no '/' or NUL,
//                                         not "." or ".."; sorted, unique)
// A save writes each listing this process read (and may remember) to its
// file atomically (temporary + rename, mode 0600, no fsync); then, in each
// shard it wrote to, the oldest files (by mtime) go until the shard holds at
// most k_max_listings / 256 files and k_max_listings_bytes / 256 bytes, so
// the whole memo stays within k_max_listings and k_max_listings_bytes.
// Temporaries left by a killed writer are swept by the same pass once an
// hour old. Two processes saving the same directory at once: the last rename
// wins, both files are right. A version-1 file (`<memo dir>/listings`) is
// ignored, and removed by the next save.
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

#include "deps/header_manifest.hpp"

namespace kcache::jit {

inline constexpr std::size_t k_listing_shards = 256;
inline constexpr std::size_t k_max_listings = 20480;              // 80 per shard
inline constexpr std::size_t k_max_listings_bytes = 32u << 20;    // 128 KiB per shard
inline constexpr std::size_t k_max_listing_file_bytes = 128u << 10;
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

// Writes the listings read in this process since the last save, one file
// each, under `<memo_dir>/listings.2/`, and bounds the shards written to
// (best effort: a failure only loses the memo).
void save_directory_listings(const std::filesystem::path& memo_dir);

// Forgets the in-process listings (the files are read again on next use); for tests and benchmarks.
void forget_directory_listings();

// The file that holds (or would hold) the listing of directory (dev, ino).
std::filesystem::path listing_file(const std::filesystem::path& memo_dir, std::uint64_t dev, std::uint64_t ino);

// Bytes read from listing files by this process (all threads); for tests
// that check a lookup reads only its own directory's file.
std::uint64_t listing_bytes_read();

// The text of one listing file, and its parse (nothing when it is not exactly a version-2 file).
std::string serialize_directory_listing(const DirectoryListing& listing);
std::optional<DirectoryListing> parse_directory_listing(std::string_view text);

}  // namespace kcache::jit
