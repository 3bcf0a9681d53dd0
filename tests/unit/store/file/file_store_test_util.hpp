// tests/unit/store/file/file_store_test_util.hpp: small helpers for the FileStore tests.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kcache/file_store.hpp"
#include "support/files.hpp"
#include "support/payload.hpp"

namespace kcache::test {

inline FileStoreOptions quiet_options(const std::filesystem::path& root, std::vector<std::string>* warnings = nullptr) {
  FileStoreOptions o;
  o.root = root;
  o.max_size_bytes = 0;
  o.fsync = FsyncPolicy::none;  // tests that care about fsync set it themselves
  o.stale_temp_age = std::chrono::seconds(0);
  o.warn = [warnings](const std::string& line) {
    if (warnings != nullptr) {
      warnings->push_back(line);
    }
  };
  return o;
}

inline std::unique_ptr<FileStore> open_store(const FileStoreOptions& o) {
  auto s = FileStore::open(o);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().describe());
  return s ? std::move(*s) : nullptr;
}

inline std::filesystem::path payload_path(const std::filesystem::path& root, const Key& key) {
  return root / "v1" / "entries" / key.shard() / key.hex();
}

inline std::filesystem::path passport_path(const std::filesystem::path& root, const Key& key) {
  return root / "v1" / "entries" / key.shard() / (key.hex() + ".pass");
}

// Sets the last-use stamp (passport mtime) of `key` to `seconds_ago` before now.
inline void age_entry(const std::filesystem::path& root, const Key& key, int seconds_ago) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto then = std::chrono::duration_cast<std::chrono::seconds>(now).count() - seconds_ago;
  const struct timespec times[2] = {{then, 0}, {then, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, passport_path(root, key).c_str(), times, 0), 0) << key.hex();
}

// Counts files left in v1/tmp and payloads without passport.
inline std::size_t count_leftovers(const std::filesystem::path& root) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root / "v1" / "tmp", ec)) {
    (void)e;
    ++n;
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "v1" / "entries", ec)) {
    const auto name = e.path().filename().string();
    if (e.is_regular_file() && name.size() == 64 &&
        !std::filesystem::exists(e.path().parent_path() / (name + ".pass"))) {
      ++n;
    }
  }
  return n;
}

}  // namespace kcache::test
