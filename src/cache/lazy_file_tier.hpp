// cache/lazy_file_tier.hpp: the disk tier of a read-only bundle image.
//
// A container image that ships its kernels as bundles (`bundles` set) often
// has no cache directory yet, or one that cannot be written (a read-only
// filesystem, an empty read-only directory). docs/bundles.md promises that a
// bundle is used "in place, nothing written": a hit served from a bundle must
// not create the cache's layout, and a cache directory that cannot be created
// must not turn the bundles off.
//
// LazyFileTier stands where the FileStore would in the configured chain while
// the cache directory holds no layout (no `v1`): every lookup is a miss that
// touches nothing, and the FileStore is opened (its layout created) by the
// first put, that is by the first compile the bundles did not serve. When the
// layout appears meanwhile (another process wrote an entry), lookups open it
// and read it. An open that fails is returned by that put (the chain warns
// once, as for any tier that cannot be written) and tried again by no later
// call: the process goes on with the bundles and compiles what they miss.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

#include "kcache/file_store.hpp"
#include "kcache/store.hpp"

namespace kcache {

// True when `cache_dir` holds something at `v1` (a layout, or a broken one
// that FileStore::open will name): the disk tier has been used there.
bool cache_layout_exists(const std::filesystem::path& cache_dir);

class LazyFileTier final : public Store {
 public:
  explicit LazyFileTier(FileStoreOptions options) : m_options(std::move(options)) {}

  std::string_view name() const noexcept override { return "file"; }
  // Miss while there is no layout; then FileStore::get.
  Result<std::optional<Artifact>> get(const Key& key) override;
  Result<std::optional<Artifact>> get_into(const Key& key, const PayloadAllocator& allocate) override;
  // Opens the FileStore (creating the layout) and puts; its open's error when it cannot be opened.
  Result<PutOutcome> put(const Artifact& artifact) override;
  Result<PutOutcome> fill(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

 private:
  // The FileStore when it is open, opening it when `create` or when the layout exists; null otherwise.
  Result<FileStore*> store(bool create);

  FileStoreOptions m_options;
  std::mutex m_mutex;
  std::unique_ptr<FileStore> m_store;
  std::optional<Error> m_failed;
};

}  // namespace kcache
