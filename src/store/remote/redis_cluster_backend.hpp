// store/remote/redis_cluster_backend.hpp: a Redis Cluster
// (redis+cluster://host:port[,host:port...]) as a remote backend, routed on
// top of plain hiredis connections (Debian's hiredis has no cluster support).
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
// At most k_max_attempts sends per operation, and no operation runs past its
// deadline (connect_timeout_ms + 2 * timeout_ms from its start): a cluster
// that does not answer is an io or timeout error, never a hang.
//
// Thread-safety: thread-safe. The slot map is shared under a mutex; each node
// has a small pool of idle connections.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/remote/redis_cluster_slots.hpp"
#include "store/remote/redis_connection.hpp"
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

  Result<std::optional<std::string>> get(std::string_view name, std::uint64_t max_bytes) override;
  Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) override;
  Result<bool> remove(std::string_view name) override;
  // "redis 7.0.15 (cluster, state ok): 3 masters 127.0.0.1:7000 [0-5460] ...,
  // 3 replicas". Refreshes the slot map first.
  Result<std::string> describe() override;
  bool supports_leases() const noexcept override { return true; }
  Result<bool> exists(std::string_view name) override;
  Result<bool> lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_release(std::string_view name, std::string_view token) override;
  Result<std::optional<LeaseInfo>> lease_inspect(std::string_view name) override;
  Result<bool> lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                  std::uint64_t ttl_ms) override;

  // Runs one command on the master serving `key`'s slot, with redirects
  // (leases, tests). A Redis error reply other than a redirect is returned as
  // a reply of type error.
  Result<RedisReply> command_for_key(std::string_view key, const std::vector<std::string_view>& argv);

  // The master currently mapped to `slot` (loads the map when empty); an
  // empty host when no master serves it.
  ClusterNode master_of(int slot);
  ClusterRoutingStats routing_stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::uint16_t k_no_node = 0xFFFF;
  static constexpr int k_max_attempts = 6;

  explicit RedisClusterBackend(RemoteSpec spec, std::vector<ClusterNode> seeds);

  // Loads the slot map from the first node that answers CLUSTER SLOTS.
  Result<void> refresh(Clock::time_point deadline);
  std::uint16_t node_index(const ClusterNode& node);  // REQUIRES: m_mutex held
  Result<std::unique_ptr<RedisConnection>> acquire(const ClusterNode& node);
  void release(const ClusterNode& node, std::unique_ptr<RedisConnection> c);
  Result<RedisReply> send(const ClusterNode& node, const std::vector<std::string_view>& argv, bool asking);
  // After `silent`, the master of `slot` in the map, failed a send: drops its
  // idle connections and reloads the map until it names another master for
  // `slot`, or `silent` answers PING on a new connection, or `deadline`
  // passes, pausing between tries. Returns at once when no node answers
  // CLUSTER SLOTS (then `last` holds why).
  void await_new_master(int slot, const ClusterNode& silent, Clock::time_point deadline, Error& last);

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
};

}  // namespace kcache::remote
