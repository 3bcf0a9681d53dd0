// LazyFileTier: a disk tier that is created by its first put (lazy_file_tier.hpp).
#include "cache/lazy_file_tier.hpp"

#include <sys/stat.h>

#include <cerrno>

namespace kcache {

bool cache_layout_exists(const std::filesystem::path& cache_dir) {
  struct stat st {};
  if (::lstat((cache_dir / "v1").c_str(), &st) == 0) {
    return true;
  }
  // ENOENT: no layout (the directory may be missing too); anything else
  // (EACCES, ENOTDIR) is for FileStore::open to name.
  return errno != ENOENT;
}

Result<FileStore*> LazyFileTier::store(bool create) {
  std::lock_guard lock(m_mutex);
  if (m_store) {
    return m_store.get();
  }
  if (m_failed) {
    return tl::unexpected(*m_failed);
  }
  if (!create && !cache_layout_exists(m_options.root)) {
    return static_cast<FileStore*>(nullptr);
  }
  auto opened = FileStore::open(m_options);
  if (!opened) {
    m_failed = opened.error();
    return tl::unexpected(opened.error());
  }
  m_store = std::move(*opened);
  return m_store.get();
}

Result<std::optional<Artifact>> LazyFileTier::get(const Key& key) {
  auto s = store(false);
  if (!s || *s == nullptr) {
    return std::optional<Artifact>{};  // no layout, or none that opens: nothing to read
  }
  return (*s)->get(key);
}

Result<std::optional<Artifact>> LazyFileTier::get_into(const Key& key, const PayloadAllocator& allocate) {
  auto s = store(false);
  if (!s || *s == nullptr) {
    return std::optional<Artifact>{};
  }
  return (*s)->get_into(key, allocate);
}

Result<PutOutcome> LazyFileTier::put(const Artifact& artifact) {
  auto s = store(true);
  if (!s) {
    return tl::unexpected(s.error());
  }
  return (*s)->put(artifact);
}

Result<PutOutcome> LazyFileTier::fill(const Artifact& artifact) {
  auto s = store(true);
  if (!s) {
    return tl::unexpected(s.error());
  }
  return (*s)->fill(artifact);
}

Result<bool> LazyFileTier::remove(const Key& key) {
  auto s = store(false);
  if (!s || *s == nullptr) {
    return false;
  }
  return (*s)->remove(key);
}

Result<std::vector<EntryInfo>> LazyFileTier::list() {
  auto s = store(false);
  if (!s || *s == nullptr) {
    return std::vector<EntryInfo>{};
  }
  return (*s)->list();
}

Result<StoreStats> LazyFileTier::stats() {
  auto s = store(false);
  if (!s || *s == nullptr) {
    return StoreStats{};
  }
  return (*s)->stats();
}

}  // namespace kcache
