// kcache/remote_lease.hpp: one compile per key across hosts.
//
// A RemoteLease hands out, for each key, at most one owner among every
// process of every host that shares a team remote. Cache (kcache/cache.hpp)
// asks for it after its local single-flight lease, so only the local leader
// of a key takes (or waits for) the remote lease: one lease per key per host.
//
// The implementation on Redis (standalone or Cluster) is RedisLease
// (src/store/remote/redis_lease.hpp; docs/single-flight.md, "Across hosts"):
// `SET kcache:v1:lease:<key> <token> NX PX <ttl>`, renewed by a heartbeat
// while the owner compiles, deleted (compare-and-delete) once the entry is
// published on the remote; a dead owner's lease expires after its ttl.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <functional>

#include "kcache/key.hpp"

namespace kcache {

// What acquire() decided.
enum class RemoteLeaseOutcome {
  owner,        // this process owns the key's lease: compile, publish, then release(key)
  published,    // another host published the entry while we waited: the peek returned it
  timed_out,    // another owner held the key for the whole wait: compile without the lease
  unavailable,  // no lease to be had (server down, breaker open, refused): compile without it
};

class RemoteLease {
 public:
  virtual ~RemoteLease() = default;

  // Takes the lease of `key`, or waits while another process owns it. While
  // waiting, `peek` is called whenever the entry may have been published (it
  // looks in the caller's store and returns true on a hit; the caller keeps
  // what it found). After taking a lease that another owner held first (it
  // released or died), `peek` is called once more before returning `owner`.
  // Never blocks longer than the configured wait plus one remote timeout.
  // An owned lease is renewed in the background until release(key).
  virtual RemoteLeaseOutcome acquire(const Key& key, const std::function<bool()>& peek) = 0;

  // Gives up the lease of `key` if this process owns it (only the owner's
  // token deletes it). Idempotent; never fails (a lease that cannot be
  // deleted expires by itself).
  virtual void release(const Key& key) noexcept = 0;
};

}  // namespace kcache
