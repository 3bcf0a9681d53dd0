// kcache/remote_stats.hpp: the counters and circuit-breaker state of each
// remote a cache directory has used, as every process of it sees them.
//
// Each remote (identified by its server: scheme, host, port, database or
// path; never credentials) has one state file under <cache_dir>/v1/stats/
// (docs/on-disk-format.md, "stats/remote-<id>"), written by every process
// that uses the remote from this cache directory: `kcache stats` and the
// Python `Store.stats()` read it here.
//
// Thread-safety: free function; reads shared memory without locks (each
// counter is read atomically; the set is not one snapshot).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kcache {

struct RemoteTierStats {
  std::string server;           // e.g. "redis://cache.internal:6379/0"; no user or password
  // Circuit breaker: "closed" (used), "open" (skipped until open_until_ms),
  // "half-open" (the open time is over: the next operation, in one process, probes it).
  std::string breaker;
  std::uint64_t open_until_ms = 0;        // wall-clock ms since the epoch; 0 when closed
  std::uint64_t consecutive_failures = 0;
  std::uint64_t breaker_opened = 0;       // times it opened
  std::uint64_t last_failure_ms = 0;      // wall-clock ms; 0: never
  std::uint64_t hits = 0, misses = 0;
  std::uint64_t errors = 0;               // failed operations
  std::uint64_t skipped = 0;              // operations skipped (breaker open or budget spent)
  std::uint64_t budget_skipped = 0;       // of them, for a spent remote_budget_ms
  std::uint64_t puts = 0, puts_already_present = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  std::uint64_t rejected = 0;             // bad objects refused
  std::uint64_t compile_us_saved = 0;
  std::uint64_t get_p50_us = 0, get_p99_us = 0;  // upper bounds of the latency histogram buckets
  std::uint64_t lease_taken = 0, lease_waits = 0, lease_waited_hits = 0, lease_takeovers = 0,
                lease_foreign_takeovers = 0, lease_timeouts = 0, lease_errors = 0, lease_lost = 0,
                lease_stalls = 0;
};

// One entry per remote used from `cache_dir`, sorted by server. Empty when
// none was (or the directory cannot be read). Damaged state files are left out.
std::vector<RemoteTierStats> remote_tier_stats(const std::filesystem::path& cache_dir);

}  // namespace kcache
