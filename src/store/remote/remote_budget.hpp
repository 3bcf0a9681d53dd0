// store/remote/remote_budget.hpp: the time one process may lose to its remotes.
//
// Every remote operation of a process (lookups, uploads and the exit flush of
// the upload queue, lease commands, EXISTS) that fails or is slow (it took at
// least half its remote's timeout_ms) spends its elapsed time from one
// budget, `remote_budget_ms`. Once it is spent, every remote of the process
// is skipped for the rest of its life (one warning): a server that accepts and
// never answers costs a process at most about the budget plus one operation's
// timeout, whatever the number of operations. Healthy, fast operations spend
// nothing, so a long-running program with a working remote never runs out.
//
// One budget is shared by the stores a process opens at once for one cache
// directory (the data tiers and the lease, open_configured_store and
// open_configured_lease): for_process() hands out the same object while one is
// alive.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace kcache::remote {

class RemoteBudget {
 public:
  // `limit` 0: no bound (nothing is ever skipped for the budget).
  explicit RemoteBudget(std::chrono::milliseconds limit) : m_limit_us(static_cast<std::uint64_t>(limit.count()) * 1000) {}

  // The budget of this process for `scope` (a cache directory): the one still
  // alive for it, else a new one with `limit`.
  static std::shared_ptr<RemoteBudget> for_process(const std::string& scope, std::chrono::milliseconds limit);

  // True when the budget is spent: skip the operation.
  bool spent() const noexcept {
    return m_limit_us != 0 && m_spent_us.load(std::memory_order_relaxed) >= m_limit_us;
  }
  // Spends `elapsed`. Returns true for the one call that spent the last of it
  // (that caller warns).
  bool spend(std::chrono::steady_clock::duration elapsed) noexcept;

  std::uint64_t limit_ms() const noexcept { return m_limit_us / 1000; }
  std::uint64_t spent_ms() const noexcept { return m_spent_us.load(std::memory_order_relaxed) / 1000; }

 private:
  std::uint64_t m_limit_us;
  std::atomic<std::uint64_t> m_spent_us{0};
};

// Time the current remote operation of this thread spent waiting for a
// Redis Cluster to fail over (for a replica to be promoted: CLUSTERDOWN,
// TRYAGAIN, a dead master), noted by the cluster backend. Waiting is not lost
// time (docs/configuration.md): RemoteStore charges an operation's elapsed
// time less this to the budget. take_failover_wait() returns what was noted
// since the last call and starts again from zero.
void add_failover_wait(std::chrono::steady_clock::duration waited) noexcept;
std::chrono::steady_clock::duration take_failover_wait() noexcept;

}  // namespace kcache::remote
