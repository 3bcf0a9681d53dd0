// kcache/tiered_store.hpp: a chain of stores, fastest first.
//
// get() asks each tier in order; a hit in a lower tier fills the tiers above
// it (memory in front of file: a file hit lands in memory). put() writes to
// every tier. A tier that fails (returns an Error) is counted, warned about
// once per tier for the life of the chain, and skipped for that operation; it
// is asked again on the next one, so a tier that recovers is used again. The
// chain returns an error only when every tier failed.
//
// Thread-safety: thread-safe when every tier is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kcache/store.hpp"

namespace kcache {

// One tier's answer to one get(), as TieredStore records it (see
// TieredStore::start_lookup_trace).
struct TierLookup {
  enum class Outcome { hit, miss, error };
  std::string tier;          // the tier's location (see set_tier_location)
  std::uint64_t us = 0;      // how long the tier took to answer
  Outcome outcome = Outcome::miss;
};

class TieredStore final : public Store {
 public:
  // Takes ownership of `tiers` (fastest first; none may be null). `warn`
  // receives one line the first time each tier fails; by default the line is
  // printed to stderr with a "kcache: warning: " prefix.
  explicit TieredStore(std::vector<std::unique_ptr<Store>> tiers,
                       std::function<void(const std::string&)> warn = {});
  ~TieredStore() override;
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  std::string_view name() const noexcept override { return "tiered"; }
  // The first tier's that has any (the file tier's).
  RequestStats* request_stats() noexcept override;
  // Hit: the artifact from the first tier that has it, after filling the tiers
  // above (a failed fill is counted, never returned). Miss: std::nullopt when
  // no tier has it. Error: only when every tier failed.
  Result<std::optional<Artifact>> get(const Key& key) override;
  // get(), asking each tier with get_into (see Store::get_into).
  Result<std::optional<Artifact>> get_into(const Key& key, const PayloadAllocator& allocate) override;
  // get(), asking each tier with get_shared: a hit from the memory tier is its artifact, uncopied.
  Result<std::shared_ptr<const Artifact>> get_shared(const Key& key) override;
  // Writes to every tier. Returns the outcome of the lowest tier that
  // answered (the most durable one: `already_present` when the disk already
  // held it, even if the memory tier did not), and an error (the last
  // tier's) only when every tier failed. An artifact that does not verify is
  // rejected with `corrupt` by the first tier and not counted as a failure.
  Result<PutOutcome> put(const Artifact& artifact) override;
  // put() through each tier's put_then: `done` runs once every writable
  // tier has published (a remote behind a write-behind queue: after its
  // upload) or failed, with what put() returned. So a cross-host lease
  // released in `done` is released only once other hosts can find the entry.
  Result<PutOutcome> put_then(const Artifact& artifact, PutDone done) override;
  // Removes from every tier; true when any tier held the entry.
  Result<bool> remove(const Key& key) override;
  // Lists the union of every tier's entries (each key once, as the fastest
  // tier that holds it reports it, with the latest last-used time of any tier).
  Result<std::vector<EntryInfo>> list() override;
  // Sums the counters of every tier that answers; `hits`, `misses` and
  // `compile_us_saved` are those of the chain, `errors` adds the chain's tier
  // failures, and entries/size/cap are those of the last (largest) tier.
  Result<StoreStats> stats() override;

  // The tier that served the last get() of any TieredStore on this thread:
  // its index, or -1 on a miss (or before any get).
  static int last_hit_tier() noexcept;

  // Starts recording, on this thread, every tier's answer to every get() of
  // any TieredStore (a compile that looks up a key twice, around a
  // single-flight wait, records both lookups), clearing an earlier record.
  // Without it nothing is recorded (a hit costs no allocation).
  static void start_lookup_trace();
  // Stops recording on this thread and returns what was recorded, in order.
  static std::vector<TierLookup> take_lookup_trace();

  std::size_t tier_count() const noexcept;
  // REQUIRES: index < tier_count().
  Store& tier(std::size_t index) noexcept;
  // Names where tier `index` keeps its entries, for lookup traces and
  // reports: "memory", "local" (a cache directory), a remote's masked URL.
  // Default: the tier's name(), "local" for a "file" tier. Call before the
  // store is shared between threads. REQUIRES: index < tier_count().
  void set_tier_location(std::size_t index, std::string location);
  // How many operations tier `index` failed so far (REQUIRES: index < tier_count()).
  std::uint64_t tier_failures(std::size_t index) const noexcept;

 private:
  // get_into() and get_shared(): `ask(tier)` is one tier's answer, a
  // Result<Held> (Held: std::optional<Artifact> or a shared artifact).
  template <class Held, class Ask>
  Result<Held> look_up(const Key& key, const Ask& ask);
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
