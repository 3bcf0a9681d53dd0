// kcache/memory_store.hpp: an in-process LRU store with a byte cap.
//
// Holds artifacts in memory; the least recently used are evicted when the sum
// of payload sizes would exceed `max_bytes`. An artifact larger than the cap
// is not stored and evicts nothing else (put returns `stored` but the entry is
// evicted at once and counted as an eviction); with `max_bytes` 0 the store
// holds nothing.
//
// get() returns a copy of the artifact whose payload shares the stored bytes
// (kcache/payload.hpp): a hit copies the passport, never the payload, however
// large; get_shared() returns the stored artifact itself (no copy at all). Entries are not re-hashed on get, since they never leave this process. put() verifies the
// artifact against its passport first and fails with `corrupt` if it does not
// match. Counters (StoreStats) belong to the instance.
//
// Thread-safety: every method is thread-safe (one mutex; hashing on put runs
// outside it).
#pragma once

#include <cstdint>
#include <memory>

#include "kcache/store.hpp"

namespace kcache {

class MemoryStore final : public Store {
 public:
  // Creates an empty store that holds at most `max_bytes` payload bytes.
  explicit MemoryStore(std::uint64_t max_bytes);
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  std::string_view name() const noexcept override { return "memory"; }
  std::optional<Tier> tier_kind() const noexcept override { return Tier::memory; }
  Result<std::optional<Artifact>> get(const Key& key) override;
  // The artifact held, shared: the caller keeps it however soon it is evicted.
  Result<std::shared_ptr<const Artifact>> get_shared(const Key& key) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  // Checks the passport's shape and size but does not re-hash the payload.
  Result<PutOutcome> fill(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

 private:
  // The entry of `key` (null: a miss), made the most recently used and counted.
  std::shared_ptr<const Artifact> find(const Key& key);
  // Stores an artifact that has passed `check`.
  Result<PutOutcome> insert(const Artifact& artifact, Result<void> check);
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
