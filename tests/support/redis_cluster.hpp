// tests/support/redis_cluster.hpp: a real Redis Cluster for tests: masters
// and replicas (redis-server --cluster-enabled yes) on 127.0.0.1 and free
// ports, joined by `redis-cli --cluster create`, each node in its own
// directory under the test's.
//
// Every node is a RedisServer: it dies with the test process and is SIGKILLed
// by the destructor, so the cluster is stopped even when a test fails.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace kcache::test {

class RedisCluster {
 public:
  // Starts `masters` * (1 + `replicas`) nodes with cluster-node-timeout
  // `node_timeout_ms` (short, so that a killed master fails over in about two
  // seconds), creates the cluster and waits until every node says
  // cluster_state:ok and every replica is in sync (up to 30 s). Returns null
  // (and a reason in `why`) when it cannot.
  static std::unique_ptr<RedisCluster> start(const std::filesystem::path& dir, std::string* why = nullptr,
                                             int masters = 3, int replicas = 1, int node_timeout_ms = 1000);

  // redis+cluster://127.0.0.1:P1,127.0.0.1:P2,... (every node as a seed)
  std::string url() const;
  std::size_t size() const noexcept { return m_nodes.size(); }
  RedisServer& node(std::size_t i) { return *m_nodes[i]; }
  // The node listening on `port`, or null.
  RedisServer* node_on(int port);
  // The cluster node id of the node on `port` (CLUSTER MYID).
  std::string id_of(int port);
  // A running replica of the master on `master_port` (INFO replication), or
  // null.
  RedisServer* replica_of(int master_port);

  // Waits until every running node reports cluster_state:ok, all slots
  // assigned and (with `synced`) every master's replicas at its offset.
  bool wait_ok(std::chrono::milliseconds limit, bool synced = true);
  // Waits until no running node maps a slot to the node on `dead_port` (its
  // replica was promoted) and wait_ok(synced = false) holds.
  bool wait_failover(int dead_port, std::chrono::milliseconds limit);

 private:
  RedisCluster() = default;
  std::vector<std::unique_ptr<RedisServer>> m_nodes;
  int m_replicas = 0;  // replicas the cluster was created with
};

}  // namespace kcache::test
