// kcache/tiered_store.hpp: a chain of stores, fastest first.
//
// get() asks each tier in order; a hit in a lower tier fills the tiers above
// it. put() writes to every tier. A tier that fails is counted, warned about
// once, and skipped: the chain returns an error only when every tier failed.
//
// Thread-safety: thread-safe when every tier is.
#pragma once

#include <memory>
#include <vector>

#include "kcache/store.hpp"

namespace kcache {

class TieredStore final : public Store {
 public:
  explicit TieredStore(std::vector<std::unique_ptr<Store>> tiers);
  ~TieredStore() override;
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  std::string_view name() const noexcept override { return "tiered"; }
  Result<std::optional<Artifact>> get(const Key& key) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  // Lists the union of every tier's entries (each key once).
  Result<std::vector<EntryInfo>> list() override;
  // Sums the counters of every tier; `hits`/`misses` are those of the chain.
  Result<StoreStats> stats() override;

  // The tier that served the last get() on this thread: its index, or -1 on a miss.
  static int last_hit_tier() noexcept;

  std::size_t tier_count() const noexcept;
  Store& tier(std::size_t index) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
