#include "support/redis_cluster.hpp"

#include <sys/wait.h>

#include <thread>

#include "support/child.hpp"

namespace kcache::test {

namespace {

// The value of `name` in an INFO-style "name:value" text, or "".
std::string info_field(const std::string& text, const std::string& name) {
  const std::string needle = name + ":";
  auto at = text.find(needle);
  if (at == std::string::npos) {
    return {};
  }
  at += needle.size();
  return text.substr(at, text.find_first_of("\r\n", at) - at);
}

}  // namespace

std::unique_ptr<RedisCluster> RedisCluster::start(const std::filesystem::path& dir, std::string* why, int masters,
                                                  int replicas, int node_timeout_ms) {
  std::unique_ptr<RedisCluster> c(new RedisCluster());
  const int count = masters * (1 + replicas);
  c->m_replicas = masters * replicas;
  for (int i = 0; i < count; ++i) {
    const auto node_dir = dir / ("node" + std::to_string(i));
    auto s = RedisServer::start(node_dir, why,
                                {"--cluster-enabled", "yes", "--cluster-config-file", (node_dir / "nodes.conf").string(),
                                 "--cluster-node-timeout", std::to_string(node_timeout_ms)});
    if (s == nullptr) {
      return nullptr;
    }
    c->m_nodes.push_back(std::move(s));
  }
  std::vector<std::string> argv{"/usr/bin/redis-cli", "--cluster", "create"};
  for (const auto& n : c->m_nodes) {
    argv.push_back("127.0.0.1:" + std::to_string(n->port()));
  }
  argv.insert(argv.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
  std::string out;
  const int status = run_program(argv, {}, &out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (why != nullptr) {
      *why = "redis-cli --cluster create failed (" + describe_status(status) + "): " + out;
    }
    return nullptr;
  }
  if (!c->wait_ok(std::chrono::seconds(30))) {
    if (why != nullptr) {
      *why = "the cluster did not reach cluster_state:ok with replicas in sync within 30 s";
    }
    return nullptr;
  }
  return c;
}

std::string RedisCluster::url() const {
  std::string out = "redis+cluster://";
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    out += (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(m_nodes[i]->port());
  }
  return out;
}

RedisServer* RedisCluster::node_on(int port) {
  for (auto& n : m_nodes) {
    if (n->port() == port) {
      return n.get();
    }
  }
  return nullptr;
}

std::string RedisCluster::id_of(int port) {
  RedisServer* n = node_on(port);
  return n == nullptr ? std::string() : n->cli({"CLUSTER", "MYID"});
}

RedisServer* RedisCluster::replica_of(int master_port) {
  for (auto& n : m_nodes) {
    if (n->pid() <= 0) {
      continue;
    }
    const std::string repl = n->cli({"INFO", "replication"});
    if (info_field(repl, "role") == "slave" && info_field(repl, "master_port") == std::to_string(master_port)) {
      return n.get();
    }
  }
  return nullptr;
}

bool RedisCluster::wait_ok(std::chrono::milliseconds limit, bool synced) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    int linked = 0;  // replicas with their link up
    for (auto& n : m_nodes) {
      if (n->pid() <= 0) {
        continue;
      }
      const std::string info = n->cli({"CLUSTER", "INFO"});
      if (info_field(info, "cluster_state") != "ok" || info_field(info, "cluster_slots_assigned") != "16384") {
        ok = false;
        break;
      }
      if (synced) {
        const std::string repl = n->cli({"INFO", "replication"});
        if (info_field(repl, "role") == "slave" && info_field(repl, "master_link_status") == "up") {
          ++linked;
        }
        if (info_field(repl, "role") == "slave" &&
            (info_field(repl, "master_link_status") != "up" ||
             info_field(repl, "master_repl_offset") !=
                 [&] {
                   RedisServer* m = node_on(std::atoi(info_field(repl, "master_port").c_str()));
                   return m == nullptr || m->pid() <= 0 ? std::string("?")
                                                        : info_field(m->cli({"INFO", "replication"}),
                                                                     "master_repl_offset");
                 }())) {
          ok = false;
          break;
        }
      }
    }
    // Every replica of the creation is linked, one less per killed node.
    int killed = 0;
    for (auto& n : m_nodes) {
      killed += n->pid() > 0 ? 0 : 1;
    }
    if (ok && (!synced || linked >= m_replicas - killed)) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace kcache::test

namespace kcache::test {

bool RedisCluster::wait_failover(int dead_port, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const std::string port = std::to_string(dead_port);
  while (std::chrono::steady_clock::now() < deadline) {
    bool moved = true;
    for (auto& n : m_nodes) {
      if (n->pid() <= 0) {
        continue;
      }
      // redis-cli prints one array item a line: the port stands alone.
      const std::string slots = "\n" + n->cli({"CLUSTER", "SLOTS"}) + "\n";
      if (slots.find("\n" + port + "\n") != std::string::npos) {
        moved = false;
        break;
      }
    }
    if (moved) {
      return wait_ok(deadline - std::chrono::steady_clock::now() > std::chrono::milliseconds(0)
                         ? std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                 std::chrono::steady_clock::now())
                         : std::chrono::milliseconds(1),
                     false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace kcache::test
