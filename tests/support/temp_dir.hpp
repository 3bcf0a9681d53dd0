// tests/support/temp_dir.hpp: a private temporary directory per test.
#pragma once

#include <filesystem>

namespace kcache::test {

// Creates a fresh directory under $TMPDIR (or /tmp) and removes it, with
// everything in it, on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return m_path; }

 private:
  std::filesystem::path m_path;
};

}  // namespace kcache::test
