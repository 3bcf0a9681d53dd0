// store/disabled_store.hpp: the store used when the cache is turned off
// (KCACHE_DISABLE, `disable = true`).
//
// Every get is a miss, every put is accepted and dropped (`stored`), nothing
// is listed. Counters count what was asked, so `kcache stats` can show that
// the cache was bypassed. compile() and Cache do not ask it (disabled()): they
// compile as without a store. Thread-safety: thread-safe (atomic counters).
#pragma once

#include <atomic>
#include <cstdint>

#include "kcache/store.hpp"

namespace kcache {

class DisabledStore final : public Store {
 public:
  std::string_view name() const noexcept override { return "disabled"; }
  bool disabled() const noexcept override { return true; }
  Result<std::optional<Artifact>> get(const Key& key) override;
  Result<PutOutcome> put(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

 private:
  std::atomic<std::uint64_t> m_misses{0};
  std::atomic<std::uint64_t> m_puts_skipped{0};
};

}  // namespace kcache
