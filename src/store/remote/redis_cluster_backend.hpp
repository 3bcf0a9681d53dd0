// store/remote/redis_cluster_backend.hpp: a Redis Cluster
// (redis+cluster://, rediss+cluster://host:port[,host:port...]) as a remote
// backend, routed on top of plain RedisConnections (redis_connection.hpp).
//
// Routing, as the Redis Cluster specification asks of a client:
// - Each object name maps to a hash slot (redis_cluster_slots.hpp); the slot
//   map (slot -> master) comes from CLUSTER SLOTS, asked of the known masters
//   first and then of the seeds in the URL, whichever answers first.
// - "-MOVED slot host:port": the slot now lives elsewhere (resharding or a
//   failover). The slot is pointed at the new master, the command is sent
//   there, and the whole map is refreshed before the next command.
// - "-ASK slot host:port": the slot is being migrated and this object is on
//   the target. ASKING and the command go to the target; the map is not
//   changed.
// - "-TRYAGAIN" / "-CLUSTERDOWN": retried after a short pause.
// - A connection that breaks or times out is dropped (with the node's idle
//   ones), the map is refreshed (a master that died is replaced by its
//   promoted replica), and the command is tried again. While the nodes that
//   answer still name the silent master for the slot, its replica has not
//   been promoted yet (a failover takes cluster-node-timeout plus an
//   election): the client keeps reloading the map, pausing 50 ms doubling to
//   400 ms, until another master serves the slot or the silent one answers
//   PING again; it does not spend its attempts on a dead node in a few
//   milliseconds. When no node answers at all, the cluster is down, not
//   failing over: no pause.
// Deadlines (docs/configuration.md, "Deadlines"): an operation (get, put,
// remove, describe) ends within connect_timeout_ms + 2 * timeout_ms of its
// start, across redirects, map reloads, retries and failover waits; each send
// is bounded by connect_timeout_ms + timeout_ms and by what is left of that.
// At most k_max_attempts sends per operation. A cluster that does not answer
// is an io or timeout error, never a hang.
// Lease commands (docs/single-flight.md) start with the same bound, and when
// they meet a failover (a silent master still named for the slot,
// CLUSTERDOWN, TRYAGAIN) they ride it out instead of failing: renew and
// release as long as the lease may still be valid (its ttl from the call),
// take and the waiters' EXISTS for max(ttl, 2 * cluster-node-timeout) (read
// once with CONFIG GET from a live master; 15000 when refused), so that a
// herd waiting through a failover with Redis's defaults still compiles once.
// A cluster with no node answering is not failing over: no ride-out.
//
// Thread-safety: thread-safe. The slot map is shared under a mutex; each node
// has a small pool of idle connections.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/remote/redis_cluster_slots.hpp"
#include "store/remote/redis_connection.hpp"
#include "store/remote/redis_object_commands.hpp"
#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

// One cluster node, by the address clients use.
struct ClusterNode {
  std::string host;
  int port = 0;
  bool operator==(const ClusterNode&) const = default;
  std::string address() const { return host + ":" + std::to_string(port); }
};

// Parses "h:p,h:p" (the host part of a redis+cluster URL; "[v6]:p" allowed).
// Failure: invalid_argument naming the bad part.
Result<std::vector<ClusterNode>> parse_cluster_seeds(std::string_view list);

// How often the routing did what (this process; for tests and ping).
struct ClusterRoutingStats {
  std::uint64_t moved = 0;      // MOVED redirects followed
  std::uint64_t ask = 0;        // ASK redirects followed
  std::uint64_t refreshes = 0;  // slot maps loaded from CLUSTER SLOTS
  std::uint64_t retries = 0;    // sends repeated after a broken connection, TRYAGAIN or CLUSTERDOWN
  std::uint64_t failover_waits = 0;  // pauses while a dead master still served a slot in the map
};

class RedisClusterBackend final : public RemoteBackend {
 public:
  // Takes the seeds from spec.host. Connects lazily. Failure: invalid_argument
  // for a bad seed list.
  static Result<std::unique_ptr<RedisClusterBackend>> open(RemoteSpec spec);
  ~RedisClusterBackend() override;

  // describe(): "redis 7.0.15 (cluster, state ok): 3 masters 127.0.0.1:7000
  // [0-5460] ..., 3 replicas", after refreshing the slot map. list(): SCAN on
  // every master of the current slot map, one after the other.
  KCACHE_REMOTE_OBJECT_OVERRIDES;
  KCACHE_REMOTE_INSPECT_OVERRIDES;
  KCACHE_REMOTE_LEASE_OVERRIDES;

  // Runs one command on the master serving `key`'s slot, with redirects
  // (leases, tests). A Redis error reply other than a redirect is returned as
  // a reply of type error.
  Result<RedisReply> command_for_key(std::string_view key, const std::vector<std::string_view>& argv);

  // The master currently mapped to `slot` (loads the map when empty); an
  // empty host when no master serves it.
  ClusterNode master_of(int slot);
  ClusterRoutingStats routing_stats() const;

 private:
  using Clock = RedisClock;
  static constexpr std::uint16_t k_no_node = 0xFFFF;
  static constexpr int k_max_attempts = 6;
  static constexpr std::uint64_t k_default_node_timeout_ms = 15000;

  // How long a lease command follows a failover (see the top of this file).
  enum class RideOut { none, lease_validity, failover };
  // One operation: when it started, its deadline, the largest bulk string
  // its replies may hold, and (lease commands) how it rides out a failover.
  struct Operation {
    RedisDeadline start;
    RedisDeadline deadline;
    std::uint64_t max_bulk = 0;
    std::uint64_t lease_ms = 0;
    RideOut ride_out = RideOut::none;
  };

  explicit RedisClusterBackend(RemoteSpec spec, std::vector<ClusterNode> seeds);

  Operation data_operation() const;
  Operation lease_operation(std::uint64_t lease_ms, RideOut ride_out) const;
  // The deadline of `op` once it meets a failover.
  RedisDeadline ride_out_deadline(const Operation& op);
  // The cluster's cluster-node-timeout (asked once of a live master).
  std::uint64_t node_timeout_ms(RedisDeadline deadline);
  // One send's bound: connect_timeout_ms + timeout_ms, and no later than `deadline`.
  RedisDeadline step_deadline(RedisDeadline deadline) const;
  // Runs `argv` on the master of `key`'s slot within `op`, following redirects and failovers.
  Result<RedisReply> route(std::string_view key, const std::vector<std::string_view>& argv, const Operation& op);
  RedisSend sender(std::string_view name, const Operation& op);

  // Loads the slot map from the first node that answers CLUSTER SLOTS.
  Result<void> refresh(RedisDeadline deadline);
  std::uint16_t node_index(const ClusterNode& node);  // REQUIRES: m_mutex held
  Result<std::unique_ptr<RedisConnection>> acquire(const ClusterNode& node, RedisDeadline deadline);
  void release(const ClusterNode& node, std::unique_ptr<RedisConnection> c);
  Result<RedisReply> send(const ClusterNode& node, const std::vector<std::string_view>& argv, bool asking,
                          RedisDeadline deadline, std::uint64_t max_bulk);
  // After `silent`, the master of `slot` in the map, failed a send: drops its
  // idle connections and reloads the map until it names another master for
  // `slot`, or `silent` answers PING on a new connection, or `deadline`
  // passes, pausing between tries. Returns at once when no node answers
  // CLUSTER SLOTS (then `last` holds why).
  void await_new_master(int slot, const ClusterNode& silent, RedisDeadline deadline, Error& last);

  RemoteSpec m_spec;
  std::vector<ClusterNode> m_seeds;
  mutable std::mutex m_mutex;
  std::vector<ClusterNode> m_nodes;                    // masters ever seen; indices into it are stable
  std::array<std::uint16_t, k_cluster_slots> m_slots;  // slot -> m_nodes index, or k_no_node
  bool m_loaded = false;                               // a map was loaded once
  bool m_stale = false;                                // refresh before the next command
  std::size_t m_replicas = 0;                          // in the last map
  std::map<std::string, std::vector<std::unique_ptr<RedisConnection>>> m_idle;  // by address
  ClusterRoutingStats m_stats;
  std::uint64_t m_node_timeout_ms = 0;          // 0: not asked yet
  std::atomic<std::uint64_t> m_lease_ttl_ms{0};  // of the last lease taken or renewed
};

}  // namespace kcache::remote
