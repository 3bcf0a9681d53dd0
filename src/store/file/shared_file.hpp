// store/file/shared_file.hpp: a fixed-size file under v1/stats that every process
// maps MAP_SHARED (the shared counters, the check table).
//
// Each such file starts with the same header (docs/on-disk-format.md):
//
//   header := magic[8] u32 version u32 count      (count: shards or slots)
//
// and is written in full when created (no holes: a store into a hole of a
// full filesystem would SIGBUS), then linked in place, so a reader never maps
// a partial file. A missing file is mapped from the descriptor it was
// written through before it is linked (not reopened). It is not fsynced: after a crash a file that is empty,
// short or zeroed fails the size or header check and is rebuilt. Thread-safety: the functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kcache::store {

struct SharedFileFormat {
  const char* name = nullptr;  // file name inside the stats directory
  std::array<char, 8> magic{};
  std::uint32_t version = 0;
  std::uint32_t count = 0;
  std::size_t size = 0;  // of the whole file
};

struct MappedSharedFile {
  void* data = nullptr;  // null: the file cannot be used (the caller falls back)
  bool fresh = false;    // true: created (or replaced) by this call, all zero past the header
};

// Maps `format.name` in `dir_fd`. A missing file is created; a file with the
// wrong size or header is replaced. Never follows a symlink.
MappedSharedFile map_shared_file(int dir_fd, const SharedFileFormat& format, mode_t mode);

// The same in the stats directory of the cache at `cache_dir` (v1/stats, which
// must exist and not be a symlink): the mapped words, or null when the
// directory or the file cannot be used (the caller counts in memory instead).
void* map_stats_file(const std::filesystem::path& cache_dir, const SharedFileFormat& format, mode_t mode);

// Writes a new file of `format` whose bytes are `image` (its header is set
// here; `image.size()` must be `format.size`) and puts it in place of the
// current `format.name` by exchanging the two names (renameat2
// RENAME_EXCHANGE), so that whatever file it replaced, even one another
// process put there a moment before, is known: that file's u64 at
// `replaced_flag_offset` is set to 1 (processes that map it see the word and
// map the new file) and it is unlinked. Where the filesystem cannot exchange
// names it is renamed over the old file (which is then not flagged: its users
// keep it until they reopen). Returns the new file mapped, or null data when
// it could not be written or mapped.
MappedSharedFile replace_shared_file(int dir_fd, const SharedFileFormat& format, mode_t mode, std::string image,
                                     std::size_t replaced_flag_offset);

// Removes the staged files (".<name>-<suffix>.tmp") that a process killed
// while making a stats file left in `dir_fd`: one that is a second link of
// the file it made, or whose mtime is at least `min_age_s` seconds old (a
// live maker links and unlinks its own within microseconds). Returns their
// names.
std::vector<std::string> sweep_staged_shared_files(int dir_fd, std::int64_t min_age_s);

// Unmaps what map_shared_file returned.
void unmap_shared_file(void* data, const SharedFileFormat& format) noexcept;

}  // namespace kcache::store
