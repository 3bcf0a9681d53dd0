// store/remote/redis_lease.hpp: one compile per key across hosts, on Redis.
//
// RedisLease implements RemoteLease (kcache/remote_lease.hpp) on a Redis or
// Redis Cluster remote (docs/single-flight.md, "Across hosts"):
//
//   acquire  SET kcache:v1:lease:<key> <token> NX PX <ttl_ms>
//            taken: EXISTS kcache:v1:<key> (published just before: peek,
//              release, done), else owner (a heartbeat renews it every
//              ttl/3 while held)
//            held elsewhere: wait, polling (5 ms doubling to 50 ms)
//              EXISTS kcache:v1:<key> -> the owner published: peek, done
//              SET ... NX PX again    -> the owner released or died: take over
//            after 1 s: one line says who holds it (GET, PTTL) and how long
//              this may wait; a foreign lease (no expiry, or one longer than
//              ttl_ms: kcache never writes such a lease) is taken over once
//              it has held the same value for ttl_ms (an atomic script:
//              compare the value and the PTTL, then SET token PX ttl)
//            until `wait_ms` has passed: then compile without the lease
//   renew    EVAL "if GET == token then PEXPIRE" (heartbeat thread)
//   release  EVAL "if GET == token then DEL"     (after the remote publish)
//
// The token is "<hostname>:<pid>:<16 random hex>", unique per process, so an
// owner whose lease expired (it stalled longer than the ttl) and was taken
// over can neither renew nor delete its successor's. On Redis Cluster the
// lease name is routed to the master of its own slot, like any name.
//
// Every command goes through the RemoteStore's circuit breaker and timeouts:
// a server that is down makes acquire() answer `unavailable` after at most
// one operation timeout (at once while the breaker is open), and the caller
// compiles. Lease failures are counted, never warned about (the remote's
// data tier already warns once per process).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "kcache/remote_lease.hpp"
#include "store/remote/remote_counters.hpp"
#include "store/remote/remote_store.hpp"

namespace kcache::remote {

struct RedisLeaseOptions {
  std::uint64_t ttl_ms = 10000;   // a lease not renewed for this long expires (a dead owner's)
  std::uint64_t wait_ms = 300000; // the longest acquire() waits for another owner
  // After this long waiting for another owner, one line says who holds the
  // key and how long this may wait (`stall`).
  std::chrono::milliseconds stall_notice{1000};
  // Receives that line. Default: stderr with a "kcache: " prefix.
  std::function<void(const std::string&)> stall;
};

// Counters of one RedisLease (this process).
struct RedisLeaseStats {
  std::uint64_t taken = 0, waits = 0, waited_hits = 0, takeovers = 0, timeouts = 0, errors = 0, lost = 0,
                renewals = 0, foreign_takeovers = 0, stalls = 0;
};

class RedisLease final : public RemoteLease {
 public:
  // REQUIRES: store->supports_leases(). The store is used for leases and
  // EXISTS only (its own breaker; no data moves through it).
  RedisLease(std::unique_ptr<RemoteStore> store, RedisLeaseOptions options);
  // Stops the heartbeat and releases every lease still held.
  ~RedisLease() override;
  RedisLease(const RedisLease&) = delete;
  RedisLease& operator=(const RedisLease&) = delete;

  RemoteLeaseOutcome acquire(const Key& key, const std::function<bool()>& peek) override;
  void release(const Key& key) noexcept override;

  const std::string& token() const noexcept { return m_token; }
  RedisLeaseStats stats() const;

 private:
  void count(RemoteCounter counter, std::uint64_t RedisLeaseStats::*field);
  void heartbeat();
  // True for a lease kcache never writes: no expiry, or longer than ttl_ms.
  bool is_foreign(const LeaseInfo& info) const noexcept;
  // Records `key` as held and starts the heartbeat.
  void hold(const Key& key);
  // The stall line for `key`, held as `info` (null: unknown).
  std::string stall_line(const Key& key, const LeaseInfo* info, std::chrono::steady_clock::duration left) const;

  std::unique_ptr<RemoteStore> m_store;
  RedisLeaseOptions m_options;
  std::string m_token;

  mutable std::mutex m_mutex;  // guards everything below
  std::condition_variable m_wake;
  std::unordered_set<Key, KeyHash> m_held;
  RedisLeaseStats m_stats;
  bool m_stop = false;
  std::thread m_heartbeat;  // started with the first lease taken
};

}  // namespace kcache::remote
