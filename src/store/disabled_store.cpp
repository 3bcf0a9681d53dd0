#include "store/disabled_store.hpp"

namespace kcache {

Result<std::optional<Artifact>> DisabledStore::get(const Key& /*key*/) {
  m_misses.fetch_add(1, std::memory_order_relaxed);
  return std::optional<Artifact>{};
}

Result<PutOutcome> DisabledStore::put(const Artifact& /*artifact*/) {
  m_puts_skipped.fetch_add(1, std::memory_order_relaxed);
  return PutOutcome::stored;
}

Result<bool> DisabledStore::remove(const Key& /*key*/) { return false; }

Result<std::vector<EntryInfo>> DisabledStore::list() { return std::vector<EntryInfo>{}; }

Result<StoreStats> DisabledStore::stats() {
  StoreStats s;
  s.misses = m_misses.load(std::memory_order_relaxed);
  s.puts_skipped = m_puts_skipped.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kcache
