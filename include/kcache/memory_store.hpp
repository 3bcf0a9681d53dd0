// kcache/memory_store.hpp: an in-process LRU store with a byte cap.
//
// Holds artifacts in memory; the least recently used are evicted when the sum
// of payload sizes would exceed `max_bytes`. An artifact larger than the cap
// is not stored (put returns `stored` but the entry is evicted at once and
// counted as an eviction). Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <memory>

#include "kcache/store.hpp"

namespace kcache {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::uint64_t max_bytes);
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  std::string_view name() const noexcept override { return "memory"; }
  Result<std::optional<Artifact>> get(const Key& key) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
