// remote_tier_stats: the per-remote state files of a cache directory, read.
#include "kcache/remote_stats.hpp"
#include "store/remote/remote_breaker.hpp"

namespace kcache {

std::vector<RemoteTierStats> remote_tier_stats(const std::filesystem::path& cache_dir) {
  using RC = remote::RemoteCounter;
  std::vector<RemoteTierStats> out;
  for (const auto& b : remote::RemoteBreaker::open_all_for_reading(cache_dir / "v1" / "stats")) {
    const remote::BreakerState st = b->state();
    const remote::RemoteCounters& c = b->counters();
    RemoteTierStats s;
    s.server = b->server();
    const std::uint64_t now = remote::RemoteBreaker::now_ms();
    s.breaker = st.open_until_ms == 0 ? "closed" : st.open_until_ms > now ? "open" : "half-open";
    s.open_until_ms = st.open_until_ms;
    s.consecutive_failures = st.failures;
    s.breaker_opened = st.opened;
    s.last_failure_ms = st.last_failure_ms;
    s.hits = c.get(RC::hits);
    s.misses = c.get(RC::misses);
    s.errors = c.get(RC::errors);
    s.skipped = c.get(RC::skipped);
    s.budget_skipped = c.get(RC::budget_skipped);
    s.puts = c.get(RC::puts);
    s.puts_already_present = c.get(RC::puts_present);
    s.bytes_in = c.get(RC::bytes_in);
    s.bytes_out = c.get(RC::bytes_out);
    s.rejected = c.get(RC::rejected);
    s.compile_us_saved = c.get(RC::compile_us_saved);
    s.get_p50_us = c.latency_quantile(0.5);
    s.get_p99_us = c.latency_quantile(0.99);
    s.lease_taken = c.get(RC::lease_taken);
    s.lease_waits = c.get(RC::lease_waits);
    s.lease_waited_hits = c.get(RC::lease_waited_hits);
    s.lease_takeovers = c.get(RC::lease_takeovers);
    s.lease_foreign_takeovers = c.get(RC::lease_foreign_takeovers);
    s.lease_timeouts = c.get(RC::lease_timeouts);
    s.lease_errors = c.get(RC::lease_errors);
    s.lease_lost = c.get(RC::lease_lost);
    s.lease_stalls = c.get(RC::lease_stalls);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kcache
