// util/atomic_write.hpp: replace a file's content in one step.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::util {

// Whether the bytes reach the disk before the rename publishes them.
enum class FileSync {
  fsync,  // survives a power cut: the cache's own files (DESIGN rule 2)
  none,   // survives a crash of the process, as a compiler's output does: the
          // rename is still atomic, the kernel writes the bytes back later
};

// Writes `bytes` to a temporary file beside `path` (same directory, so the
// same filesystem), optionally fsyncs it, and renames it over `path`: a
// reader sees the old file or the whole new one, never a part. The temporary
// is removed on any failure. The new file gets `mode` (subject to the umask).
// Returns the errno-based error of the step that failed, naming `path`.
// Thread-safety: thread-safe (no shared state).
Result<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes, mode_t mode = 0666,
                                   FileSync sync = FileSync::fsync);

// write_file_atomically(), with the bytes written into the temporary file by
// `write(fd)` (which returns the error to report, if any) instead of taken from
// memory: for outputs streamed from a file (`kcache get -o`). The temporary is
// removed when `write` fails.
Result<void> write_file_atomically_with(const std::filesystem::path& path,
                                        const std::function<Result<void>(int fd)>& write, mode_t mode = 0666,
                                        FileSync sync = FileSync::fsync);

// Writes an output file the way a compiler's output should be written when
// it is often the same as last time (a cache hit rebuilding an unchanged
// object): when `path` is already a regular file holding exactly `bytes`, it
// is left as it is and only its modification time is set to now (so a build
// tool sees it as new); otherwise it is written with write_file_atomically()
// and FileSync::none. Only a regular file or a missing path is replaced:
// anything else at `path` is written in place, as a compiler does: a symlink
// is followed (its target opened, truncated and written; a missing target is
// created), a device, FIFO or socket is opened (a socket connected) and
// written, and a directory is refused (EISDIR). Returns whether the
// bytes were written; on failure, the errno-based error naming `path`.
// Thread-safety: thread-safe (no shared state).
Result<bool> write_output_file(const std::filesystem::path& path, std::string_view bytes, mode_t mode = 0666);

// write_output_file() for bytes streamed by `write(fd)` (`kcache get -o` copies
// a payload from its file): the same rules for what is replaced and what is
// written in place, without the "already holds the bytes" touch. On failure,
// the error of the step that failed, naming `path`.
// Thread-safety: thread-safe (no shared state).
// `sync` applies to a regular file replaced atomically (a bundle is fsynced
// before its rename; a compiler's output is not).
Result<void> write_output_file_with(const std::filesystem::path& path,
                                    const std::function<Result<void>(int fd)>& write, mode_t mode = 0666,
                                    FileSync sync = FileSync::none);

}  // namespace kcache::util
