// nvcc/file_stamp.hpp: a file's stat identity, and the digest of its bytes
// (private).
//
// A stamp is what `stat` says of a file: device, inode, size, and the
// modification and change times in nanoseconds. Any write, rename over it or
// chmod changes the change time, so an unchanged stamp stands for unchanged
// bytes, except within the racy window: a stamp taken less than 2 s after the
// file changed (or dated in the future) may be kept by a second write in the
// same timestamp tick, and is never trusted (is_racy()).
//
// Thread-safety: values and thread-safe functions.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>

namespace kcache::nvcc {

struct FileStamp {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;

  static FileStamp of(const struct stat& st) noexcept;
  // True when the stamp changed within 2 s before `now_ns`, or lies after it.
  bool is_racy(std::int64_t now_ns) const noexcept;
  // When a change to the file can no longer hide behind this stamp: its
  // newest change (mtime or ctime) plus one tick of the file clock, counted
  // as 100 ms, or 2 s when both times are whole seconds (a filesystem that
  // keeps no more).
  std::int64_t settled_ns() const noexcept;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

// stat() of `path` (following symlinks, as the compiler's open does); nullopt when it fails.
std::optional<FileStamp> stamp_of(const std::string& path);

// The SHA-256 (64 hex) of the regular file at `path`; nullopt when it cannot
// be read. `stamp`, when given, receives the stamp of the opened file.
std::optional<std::string> sha256_of_file(const std::string& path, FileStamp* stamp = nullptr);

}  // namespace kcache::nvcc
