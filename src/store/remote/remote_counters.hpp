// store/remote/remote_counters.hpp: the remote tier's counters, for
// `kcache stats`.
//
// The counters of one remote live in its state file, v1/stats/remote-<id>
// (remote_breaker.hpp), mapped MAP_SHARED and updated with lock-free 64-bit
// atomics by every process that uses the remote from one cache directory:
//
//   counters := word[64]
//   word     := u64, in the order of RemoteCounter below; the get latency
//               histogram has 32 buckets: bucket i counts round trips of
//               [2^i, 2^(i+1)) microseconds (bucket 0 also counts 0 us);
//               the lease counters follow it; unused words are 0
//
// The totals over every remote (`kcache stats`' "remote" part) are the sum
// of the remotes' files (add_all()), so a remote costs one file, not two.
// (Earlier builds also kept the totals in a second file, v1/stats/remote; it
// is no longer read or written, and a leftover one is ignored.) Where a remote's file cannot be created or mapped
// (read-only cache, another format), its counters live in this process only
// and shared() is false. Native-endian, never exchanged between machines.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

namespace kcache::remote {

enum class RemoteCounter : unsigned {
  hits, misses, errors, skipped, puts, puts_present, bytes_in, bytes_out, compile_us_saved,
  rejected, rejected_too_large, rejected_malformed, rejected_wrong_key, rejected_unsigned,
  rejected_unknown_signer, rejected_bad_signature, rejected_corrupt,
  latency_0,  // first of 32 histogram buckets
  // Cross-host leases (RedisLease), after the histogram so that older files keep their layout.
  lease_taken = latency_0 + 32,  // leases this directory's processes took
  lease_waits,                   // acquires that found another owner and waited
  lease_waited_hits,             // waits that ended with the owner's published entry
  lease_takeovers,               // leases taken after waiting, with nothing published (the owner died or failed)
  lease_timeouts,                // waits that ran out (remote_lease_wait_ms): compiled without the lease
  lease_errors,                  // lease commands that failed (server down, breaker open): compiled without
  lease_lost,                    // renewals that found the lease gone or taken over while compiling
  puts_too_large,                // entries not uploaded: larger than max_entry_size as a remote object
  // Added later (zero in older files).
  budget_skipped,                // operations skipped because the process spent its remote_budget_ms
  breaker_opened,                // times a breaker opened (a failure in this directory's processes)
  lease_foreign_takeovers,       // foreign leases (no expiry, or longer than the ttl) taken over
  lease_stalls,                  // waits that lasted past stall_notice (and said so)
  count_
};

class RemoteCounters {
 public:
  static constexpr unsigned k_words = 64;

  // Zeroed counters owned by this object, in this process only (a sum).
  static std::unique_ptr<RemoteCounters> in_process();
  // Counters over `words` (k_words of them, 8-byte aligned, owned by the
  // caller and outliving the result): the per-remote counters in a
  // RemoteBreaker's file.
  static std::unique_ptr<RemoteCounters> over(std::uint64_t* words, bool shared);
  // Adds every counter of `other` (histogram buckets included) to these.
  void add_all(const RemoteCounters& other) noexcept;
  ~RemoteCounters();
  RemoteCounters(const RemoteCounters&) = delete;
  RemoteCounters& operator=(const RemoteCounters&) = delete;

  void add(RemoteCounter counter, std::uint64_t value = 1) noexcept;
  std::uint64_t get(RemoteCounter counter) const noexcept;
  // Counts one get round trip of `us` microseconds in the histogram.
  void add_latency(std::uint64_t us) noexcept;
  // The `q` quantile (0..1) of the histogram, as the upper bound of its
  // bucket in microseconds; 0 when empty.
  std::uint64_t latency_quantile(double q) const noexcept;

  bool shared() const noexcept { return m_shared; }

 private:
  RemoteCounters() = default;
  std::uint64_t* word(unsigned index) const noexcept { return m_words + index; }

  std::uint64_t* m_words = nullptr;
  bool m_shared = false;
  std::unique_ptr<std::uint64_t[]> m_local;
};

}  // namespace kcache::remote
