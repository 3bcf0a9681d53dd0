// tests/support/disk_usage.hpp: what a cache directory holds on disk, walked
// independently of the store's own accounting (header-only; tests and benchmarks).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <system_error>

namespace kcache::test {

// Bytes of the regular files under v1/entries, v1/tmp and v1/stats of the
// cache at `root`: what its size cap bounds. Files that vanish during the
// walk count as nothing.
inline std::uint64_t bytes_under_cap(const std::filesystem::path& root) {
  std::uint64_t bytes = 0;
  for (const char* sub : {"entries", "tmp", "stats"}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root / "v1" / sub, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code e2;
      if (it->is_regular_file(e2)) {
        const auto size = it->file_size(e2);
        bytes += e2 ? 0 : size;
      }
    }
  }
  return bytes;
}

// Bytes `p` really occupies on disk (st_blocks, as du counts them), not its
// length; 0 when it does not exist. A symlink is not followed.
inline std::uint64_t disk_bytes(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

// Bytes the tree at `root` really occupies on disk, as `du -s` counts them
// (`root` and everything under it, directories included).
inline std::uint64_t tree_disk_bytes(const std::filesystem::path& root) {
  std::uint64_t total = disk_bytes(root);
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    total += disk_bytes(it->path());
  }
  return total;
}

}  // namespace kcache::test
