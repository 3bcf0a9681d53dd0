#include "store/remote/redis_cluster_backend.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "store/remote/redis_object_commands.hpp"
#include "store/remote/remote_budget.hpp"

namespace kcache::remote {

namespace {

// The leases this process holds on a cluster, by lease name, with their ttl:
// every backend of the process sees them (the lease and the data tier are
// separate stores over separate backends). An upload of an entry whose lease
// is held rides a failover out (put).
class HeldLeases {
 public:
  void hold(std::string_view name, std::uint64_t ttl_ms) {
    std::lock_guard lock(m_mutex);
    m_ttl[std::string(name)] = ttl_ms;
  }
  void drop(std::string_view name) {
    std::lock_guard lock(m_mutex);
    if (const auto at = m_ttl.find(name); at != m_ttl.end()) {
      m_ttl.erase(at);
    }
  }
  std::optional<std::uint64_t> ttl_of(std::string_view name) {
    std::lock_guard lock(m_mutex);
    const auto at = m_ttl.find(name);
    return at == m_ttl.end() ? std::nullopt : std::optional<std::uint64_t>(at->second);
  }

 private:
  std::mutex m_mutex;
  std::map<std::string, std::uint64_t, std::less<>> m_ttl;
};

HeldLeases& held_leases() {
  static HeldLeases leases;
  return leases;
}

// The lease name of an object name: kcache:v1:KEY -> kcache:v1:lease:KEY ("" for another name).
std::string lease_name_of(std::string_view object) {
  constexpr std::string_view k_objects = "kcache:v1:";
  if (object.substr(0, k_objects.size()) != k_objects) {
    return {};
  }
  return std::string(k_objects) + "lease:" + std::string(object.substr(k_objects.size()));
}

}  // namespace

namespace {

constexpr std::size_t k_max_idle_per_node = 4;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::optional<ClusterNode> parse_address(std::string_view text) {
  ClusterNode n;
  std::string_view host = text;
  int port = 6379;
  const auto colon = text.rfind(':');
  if (colon != std::string_view::npos && (text.front() != '[' || text[colon - 1] == ']')) {
    host = text.substr(0, colon);
    const std::string_view p = text.substr(colon + 1);
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || end != p.data() + p.size() || port <= 0 || port > 65535) {
      return std::nullopt;
    }
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) {
    return std::nullopt;
  }
  n.host = std::string(host);
  n.port = port;
  return n;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" -> the node.
std::optional<ClusterNode> redirect_target(std::string_view error) {
  const auto last_space = error.rfind(' ');
  if (last_space == std::string_view::npos) {
    return std::nullopt;
  }
  return parse_address(error.substr(last_space + 1));
}

int redirect_slot(std::string_view error) {
  const auto first = error.find(' ');
  const auto second = error.find(' ', first + 1);
  int slot = -1;
  if (first != std::string_view::npos && second != std::string_view::npos) {
    std::from_chars(error.data() + first + 1, error.data() + second, slot);
  }
  return slot >= 0 && slot < k_cluster_slots ? slot : -1;
}

}  // namespace

Result<std::vector<ClusterNode>> parse_cluster_seeds(std::string_view list) {
  std::vector<ClusterNode> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item.empty()) {
      continue;
    }
    auto node = parse_address(item);
    if (!node) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("bad cluster node \"{}\"; use redis+cluster://host:port[,host:port...]", item));
    }
    out.push_back(std::move(*node));
  }
  if (out.empty()) {
    return make_error(ErrorCode::invalid_argument, "no cluster node; use redis+cluster://host:port[,host:port...]");
  }
  return out;
}

Result<std::unique_ptr<RedisClusterBackend>> RedisClusterBackend::open(RemoteSpec spec) {
  auto seeds = parse_cluster_seeds(spec.host);
  if (!seeds) {
    return make_error(ErrorCode::invalid_argument, fmt::format("remote {}: {}", spec.masked(), seeds.error().message));
  }
  return std::unique_ptr<RedisClusterBackend>(new RedisClusterBackend(std::move(spec), std::move(*seeds)));
}

RedisClusterBackend::RedisClusterBackend(RemoteSpec spec, std::vector<ClusterNode> seeds)
    : m_spec(std::move(spec)), m_seeds(std::move(seeds)) {
  m_slots.fill(k_no_node);
}

RedisClusterBackend::~RedisClusterBackend() = default;

std::uint16_t RedisClusterBackend::node_index(const ClusterNode& node) {
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    if (m_nodes[i] == node) {
      return static_cast<std::uint16_t>(i);
    }
  }
  m_nodes.push_back(node);
  return static_cast<std::uint16_t>(m_nodes.size() - 1);
}

RedisDeadline RedisClusterBackend::step_deadline(RedisDeadline deadline) const {
  return std::min(deadline, Clock::now() + std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} +
                                                                     m_spec.timeout_ms));
}

RedisClusterBackend::Operation RedisClusterBackend::data_operation() const {
  Operation op;
  op.start = Clock::now();
  op.deadline =
      op.start + std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} + 2 * std::uint64_t{m_spec.timeout_ms});
  op.max_bulk = k_small_reply;
  return op;
}

RedisClusterBackend::Operation RedisClusterBackend::lease_operation(std::uint64_t lease_ms, RideOut ride_out) const {
  Operation op = data_operation();
  op.lease_ms = lease_ms;
  op.ride_out = lease_ms > 0 ? ride_out : RideOut::none;
  return op;
}

std::uint64_t RedisClusterBackend::node_timeout_ms(RedisDeadline deadline) {
  std::vector<ClusterNode> masters;
  {
    std::lock_guard lock(m_mutex);
    if (m_node_timeout_ms != 0) {
      return m_node_timeout_ms;
    }
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
      if (std::find(m_slots.begin(), m_slots.end(), static_cast<std::uint16_t>(i)) != m_slots.end()) {
        masters.push_back(m_nodes[i]);
      }
    }
  }
  std::uint64_t ms = k_default_node_timeout_ms;  // also when CONFIG is refused (ACL, a managed service)
  for (const auto& node : masters) {
    auto r = send(node, {"CONFIG", "GET", "cluster-node-timeout"}, false, step_deadline(deadline), k_small_reply);
    if (!r) {
      continue;  // the dead master, most likely
    }
    if (r->type == RedisReply::Type::array && r->elements.size() == 2 &&
        r->elements[1].type == RedisReply::Type::string) {
      const std::string& v = r->elements[1].str;
      std::uint64_t parsed = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
      if (ec == std::errc() && end == v.data() + v.size() && parsed > 0) {
        ms = parsed;
      }
    }
    break;
  }
  std::lock_guard lock(m_mutex);
  m_node_timeout_ms = ms;
  return ms;
}

RedisDeadline RedisClusterBackend::ride_out_deadline(const Operation& op) {
  switch (op.ride_out) {
    case RideOut::none: return op.deadline;
    case RideOut::lease_validity: return std::max(op.deadline, op.start + std::chrono::milliseconds(op.lease_ms));
    case RideOut::failover: {
      // A waiter: the lease it waits for may be valid on the promoted
      // replica, and the owner may publish meanwhile; it follows the
      // failover as long as a failover may take (twice cluster-node-timeout:
      // failure detection, then the election) and at least the lease's ttl.
      const std::uint64_t failover_ms = 2 * node_timeout_ms(op.deadline);
      return std::max(op.deadline, op.start + std::chrono::milliseconds(std::max(op.lease_ms, failover_ms)));
    }
  }
  return op.deadline;
}

Result<std::unique_ptr<RedisConnection>> RedisClusterBackend::acquire(const ClusterNode& node,
                                                                      RedisDeadline deadline) {
  {
    std::lock_guard lock(m_mutex);
    auto it = m_idle.find(node.address());
    if (it != m_idle.end() && !it->second.empty()) {
      auto c = std::move(it->second.back());
      it->second.pop_back();
      return c;
    }
  }
  return RedisConnection::connect(m_spec, node.host, node.port, deadline);
}

void RedisClusterBackend::release(const ClusterNode& node, std::unique_ptr<RedisConnection> c) {
  if (c->broken()) {
    return;
  }
  std::lock_guard lock(m_mutex);
  auto& pool = m_idle[node.address()];
  if (pool.size() < k_max_idle_per_node) {
    pool.push_back(std::move(c));
  }
}

Result<RedisReply> RedisClusterBackend::send(const ClusterNode& node, const std::vector<std::string_view>& argv,
                                             bool asking, RedisDeadline deadline, std::uint64_t max_bulk) {
  auto c = acquire(node, deadline);
  if (!c) {
    return tl::unexpected(c.error());
  }
  if (asking) {
    auto a = (*c)->command({"ASKING"}, deadline, k_small_reply);
    if (!a || a->type == RedisReply::Type::error) {
      release(node, std::move(*c));
      return a;
    }
  }
  auto r = (*c)->command(argv, deadline, max_bulk);
  release(node, std::move(*c));
  return r;
}

Result<void> RedisClusterBackend::refresh(RedisDeadline deadline) {
  std::vector<ClusterNode> candidates;
  {
    std::lock_guard lock(m_mutex);
    // Masters of the last map first (they know the newest epoch), then seeds.
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
      if (std::find(m_slots.begin(), m_slots.end(), static_cast<std::uint16_t>(i)) != m_slots.end()) {
        candidates.push_back(m_nodes[i]);
      }
    }
  }
  for (const auto& s : m_seeds) {
    if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
      candidates.push_back(s);
    }
  }
  Error last{ErrorCode::io, fmt::format("no node of {} answered CLUSTER SLOTS", m_spec.masked()), {}};
  for (const auto& node : candidates) {
    if (Clock::now() >= deadline) {
      last = Error{ErrorCode::timeout,
                   fmt::format("{}: no node answered CLUSTER SLOTS within the timeout (raise timeout_ms or "
                               "check the cluster)",
                               m_spec.masked()),
                   {}};
      break;
    }
    // A slot map fragmented by many reshards holds thousands of ranges: the
    // reply as a whole may take 16 MiB (every string in it is small).
    auto r = send(node, {"CLUSTER", "SLOTS"}, false, step_deadline(deadline), std::uint64_t{16} << 20);
    if (!r) {
      last = r.error();
      continue;
    }
    if (r->type != RedisReply::Type::array || r->elements.empty()) {
      last = Error{ErrorCode::io,
                   fmt::format("{}: {} answered CLUSTER SLOTS with {} (is it a cluster node? for a standalone "
                               "server use redis://)",
                               m_spec.masked(), node.address(),
                               r->type == RedisReply::Type::error ? r->str : std::string("no slots")),
                   {}};
      continue;
    }
    // Each entry: [start, end, [host, port, id, ...] (master), [host, port, ...] (replicas)...].
    struct Range {
      int start;
      int end;
      ClusterNode master;
    };
    std::vector<Range> ranges;
    std::set<std::string> replicas;
    bool ok = true;
    auto node_of = [&](const RedisReply& e) -> std::optional<ClusterNode> {
      if (e.type != RedisReply::Type::array || e.elements.size() < 2 || e.elements[0].type != RedisReply::Type::string ||
          e.elements[1].type != RedisReply::Type::integer || e.elements[1].integer <= 0 ||
          e.elements[1].integer > 65535) {
        return std::nullopt;
      }
      // An empty or "?" endpoint means "the address you reached me at".
      const std::string& h = e.elements[0].str;
      return ClusterNode{h.empty() || h == "?" ? node.host : h, static_cast<int>(e.elements[1].integer)};
    };
    for (const auto& entry : r->elements) {
      if (entry.type != RedisReply::Type::array || entry.elements.size() < 3 ||
          entry.elements[0].type != RedisReply::Type::integer || entry.elements[1].type != RedisReply::Type::integer ||
          entry.elements[0].integer < 0 || entry.elements[1].integer >= k_cluster_slots ||
          entry.elements[0].integer > entry.elements[1].integer) {
        ok = false;
        break;
      }
      auto master = node_of(entry.elements[2]);
      if (!master) {
        ok = false;
        break;
      }
      ranges.push_back({static_cast<int>(entry.elements[0].integer), static_cast<int>(entry.elements[1].integer),
                        std::move(*master)});
      for (std::size_t i = 3; i < entry.elements.size(); ++i) {
        if (auto rep = node_of(entry.elements[i])) {
          replicas.insert(rep->address());
        }
      }
    }
    if (!ok) {
      last = Error{ErrorCode::io,
                   fmt::format("{}: {} sent a malformed CLUSTER SLOTS reply", m_spec.masked(), node.address()), {}};
      continue;
    }
    std::lock_guard lock(m_mutex);
    m_slots.fill(k_no_node);
    for (const auto& range : ranges) {
      const std::uint16_t index = node_index(range.master);
      std::fill(m_slots.begin() + range.start, m_slots.begin() + range.end + 1, index);
    }
    m_replicas = replicas.size();
    m_loaded = true;
    m_stale = false;
    ++m_stats.refreshes;
    return {};
  }
  return tl::unexpected(last);
}

void RedisClusterBackend::await_new_master(int slot, const ClusterNode& silent, RedisDeadline deadline,
                                           Error& last) {
  // Looking for the new master is waiting for the failover, not lost time (remote_budget.hpp).
  const auto started = Clock::now();
  struct Noted {
    Clock::time_point started;
    ~Noted() { add_failover_wait(Clock::now() - started); }
  } noted{started};
  {
    // Its other idle connections are as dead as the one that failed (or the
    // server restarted and closed them all).
    std::lock_guard lock(m_mutex);
    m_idle.erase(silent.address());
  }
  constexpr auto k_first_pause = std::chrono::milliseconds(50);
  constexpr auto k_max_pause = std::chrono::milliseconds(400);
  auto pause = std::chrono::duration_cast<Clock::duration>(k_first_pause);
  for (;;) {
    if (auto r = refresh(deadline); !r) {
      last = r.error();
      std::lock_guard lock(m_mutex);
      m_stale = true;
      return;
    }
    {
      std::lock_guard lock(m_mutex);
      if (m_slots[slot] == k_no_node || !(m_nodes[m_slots[slot]] == silent)) {
        return;  // promoted (or no master at all: the caller says so)
      }
    }
    // Still named by the nodes that answer: alive after all (a connection
    // broke), or dead and not yet replaced by its replica.
    if (auto c = RedisConnection::connect(m_spec, silent.host, silent.port, step_deadline(deadline))) {
      auto pong = (*c)->command({"PING"}, step_deadline(deadline), k_small_reply);
      if (pong && pong->type != RedisReply::Type::error) {
        release(silent, std::move(*c));
        return;
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return;
    }
    {
      std::lock_guard lock(m_mutex);
      ++m_stats.failover_waits;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min<Clock::duration>(pause * 2, k_max_pause);
  }
}

Result<RedisReply> RedisClusterBackend::command_for_key(std::string_view key,
                                                        const std::vector<std::string_view>& argv) {
  Operation op = data_operation();
  op.max_bulk = m_spec.max_entry_size + 1;
  return route(key, argv, op);
}

Result<RedisReply> RedisClusterBackend::route(std::string_view key, const std::vector<std::string_view>& argv,
                                              const Operation& op) {
  RedisDeadline deadline = op.deadline;
  bool riding_out = false;
  // A lease command that meets a failover (a dead master, CLUSTERDOWN) waits
  // for it as long as its lease may still matter (ride_out_deadline).
  auto ride_out = [&] {
    if (!riding_out && op.ride_out != RideOut::none) {
      riding_out = true;
      deadline = ride_out_deadline(op);
    }
  };
  const int slot = cluster_key_slot(key);
  std::optional<ClusterNode> ask_target;
  bool force_refresh = false;
  Error last{ErrorCode::io, fmt::format("{}: no attempt", m_spec.masked()), {}};
  // Redirects and sends to a node that is alive count as attempts; pauses
  // while a lease command rides out a failover do not (the deadline bounds them).
  int attempts = 0;
  for (int pass = 0;; ++pass) {
    if (pass > 0 && Clock::now() >= deadline) {
      last = Error{ErrorCode::timeout,
                   fmt::format("{}: slot {} not served within the operation's deadline ({}); raise timeout_ms or "
                               "check the cluster",
                               m_spec.masked(), slot, last.message),
                   {}};
      break;
    }
    if (attempts >= k_max_attempts) {
      break;
    }
    ++attempts;
    ClusterNode node;
    if (ask_target) {
      node = *ask_target;
    } else {
      bool need_refresh = false;
      {
        std::lock_guard lock(m_mutex);
        need_refresh = !m_loaded || m_slots[slot] == k_no_node || force_refresh || (pass == 0 && m_stale);
      }
      if (need_refresh) {
        force_refresh = false;
        if (auto r = refresh(deadline); !r) {
          last = r.error();  // route with the old map, if any
        }
      }
      std::lock_guard lock(m_mutex);
      if (m_slots[slot] == k_no_node) {
        if (!m_loaded) {
          return tl::unexpected(last);
        }
        return make_error(ErrorCode::io, fmt::format("{}: no master serves slot {} (is the cluster down? check "
                                                     "`redis-cli cluster info`)",
                                                     m_spec.masked(), slot));
      }
      node = m_nodes[m_slots[slot]];
    }
    const bool asking = ask_target.has_value();
    ask_target.reset();
    auto reply = send(node, argv, asking, step_deadline(deadline), op.max_bulk);
    if (!reply) {
      if (reply.error().code == k_reply_too_large) {
        return reply;  // the node answered: nothing to retry
      }
      // Dead or unreachable node: maybe a failover; follow it, then retry.
      last = reply.error();
      {
        std::lock_guard lock(m_mutex);
        ++m_stats.retries;
      }
      ride_out();
      const std::uint64_t waits_before = routing_stats().failover_waits;
      await_new_master(slot, node, deadline, last);
      if (riding_out && routing_stats().failover_waits != waits_before) {
        --attempts;  // it waited for a promotion: not an attempt spent on a live node
      }
      continue;
    }
    if (reply->type == RedisReply::Type::error) {
      const std::string& e = reply->str;
      if (starts_with(e, "MOVED ")) {
        auto target = redirect_target(e);
        const int moved_slot = redirect_slot(e);
        if (!target || moved_slot < 0) {
          return make_error(ErrorCode::io, fmt::format("{}: {} sent a malformed redirect \"{}\"", m_spec.masked(),
                                                       node.address(), e));
        }
        std::lock_guard lock(m_mutex);
        m_slots[moved_slot] = node_index(*target);
        m_stale = true;  // the next command reloads the whole map
        ++m_stats.moved;
        last = Error{ErrorCode::io, fmt::format("{}: too many redirects for slot {} (last: {})", m_spec.masked(),
                                                slot, e),
                     {}};
        continue;
      }
      if (starts_with(e, "ASK ")) {
        ask_target = redirect_target(e);
        if (!ask_target) {
          return make_error(ErrorCode::io, fmt::format("{}: {} sent a malformed redirect \"{}\"", m_spec.masked(),
                                                       node.address(), e));
        }
        std::lock_guard lock(m_mutex);
        ++m_stats.ask;
        last = Error{ErrorCode::io, fmt::format("{}: too many redirects for slot {} (last: {})", m_spec.masked(),
                                                slot, e),
                     {}};
        continue;
      }
      if (starts_with(e, "TRYAGAIN") || starts_with(e, "CLUSTERDOWN")) {
        last = Error{ErrorCode::io, fmt::format("{}: {} answered {}", m_spec.masked(), node.address(), e), {}};
        {
          std::lock_guard lock(m_mutex);
          ++m_stats.retries;
          if (starts_with(e, "CLUSTERDOWN")) {
            force_refresh = true;
          }
        }
        ride_out();
        --attempts;  // a cluster between two masters: the deadline bounds the wait
        const auto pause = std::min<Clock::duration>(std::chrono::milliseconds(50 << std::min(pass, 3)),
                                                     std::max<Clock::duration>(deadline - Clock::now(), {}));
        std::this_thread::sleep_for(pause);
        add_failover_wait(pause);
        continue;
      }
    }
    return reply;
  }
  return tl::unexpected(last);
}

RedisSend RedisClusterBackend::sender(std::string_view name, const Operation& op) {
  return [this, name, op](const std::vector<std::string_view>& argv, std::uint64_t max_bulk) {
    Operation with = op;
    with.max_bulk = max_bulk;
    return route(name, argv, with);
  };
}

Result<std::optional<std::string>> RedisClusterBackend::get(std::string_view name, std::uint64_t max_bytes) {
  return redis_get_object(sender(name, data_operation()), name, max_bytes, m_spec.masked());
}

Result<std::optional<std::string>> RedisClusterBackend::get_prefix(std::string_view name, std::uint64_t bytes) {
  return redis_get_prefix(sender(name, data_operation()), name, bytes, m_spec.masked());
}

Result<bool> RedisClusterBackend::put(std::string_view name, std::string_view value, std::uint64_t ttl_s) {
  // The upload of an entry whose lease this process holds is what its
  // waiters wait for: it rides a failover out as their lease polls do, so
  // that one compile per key holds through a failover.
  const auto held = held_leases().ttl_of(lease_name_of(name));
  return redis_put_object(sender(name, held ? lease_operation(*held, RideOut::failover) : data_operation()), name,
                          value, ttl_s, m_spec.masked());
}

Result<bool> RedisClusterBackend::remove(std::string_view name) {
  return redis_remove_object(sender(name, data_operation()), name, m_spec.masked());
}

// The lease of a key is routed like any other name: to the master of its own
// slot. EXISTS is the waiters' poll (RedisLease): it rides out a failover as
// a take does.
Result<bool> RedisClusterBackend::exists(std::string_view name) {
  return redis_object_exists(sender(name, lease_operation(m_lease_ttl_ms.load(), RideOut::failover)), name,
                             m_spec.masked());
}

Result<bool> RedisClusterBackend::lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  m_lease_ttl_ms.store(ttl_ms);
  auto r = redis_lease_take(sender(name, lease_operation(ttl_ms, RideOut::failover)), name, token, ttl_ms,
                            m_spec.masked());
  if (r && *r) {
    held_leases().hold(name, ttl_ms);
  }
  return r;
}

Result<bool> RedisClusterBackend::lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  m_lease_ttl_ms.store(ttl_ms);
  auto r = redis_lease_renew(sender(name, lease_operation(ttl_ms, RideOut::lease_validity)), name, token, ttl_ms,
                             m_spec.masked());
  if (!r || !*r) {
    held_leases().drop(name);  // lost, or no longer known to be ours
  }
  return r;
}

Result<bool> RedisClusterBackend::lease_release(std::string_view name, std::string_view token) {
  held_leases().drop(name);
  return redis_lease_release(sender(name, lease_operation(m_lease_ttl_ms.load(), RideOut::lease_validity)), name,
                             token, m_spec.masked());
}

Result<std::string> RedisClusterBackend::describe() {
  const RedisDeadline deadline = data_operation().deadline;
  if (auto r = refresh(deadline); !r) {
    return tl::unexpected(r.error());
  }
  // Masters and their slot ranges, in slot order.
  std::vector<std::pair<ClusterNode, std::string>> masters;
  std::size_t replicas = 0;
  {
    std::lock_guard lock(m_mutex);
    replicas = m_replicas;
    for (int s = 0; s < k_cluster_slots;) {
      const std::uint16_t index = m_slots[s];
      int e = s;
      while (e + 1 < k_cluster_slots && m_slots[e + 1] == index) {
        ++e;
      }
      if (index != k_no_node) {
        const ClusterNode& n = m_nodes[index];
        auto it = std::find_if(masters.begin(), masters.end(), [&](const auto& m) { return m.first == n; });
        if (it == masters.end()) {
          masters.emplace_back(n, std::string());
          it = masters.end() - 1;
        }
        it->second += fmt::format("{}{}", it->second.empty() ? "" : ",", s == e ? fmt::format("{}", s)
                                                                                 : fmt::format("{}-{}", s, e));
      }
      s = e + 1;
    }
  }
  if (masters.empty()) {
    return make_error(ErrorCode::io, fmt::format("{}: the cluster serves no slot", m_spec.masked()));
  }
  auto field = [](const std::string& text, std::string_view name) -> std::string {
    const std::string needle = std::string(name) + ":";
    const auto at = text.find(needle);
    if (at == std::string::npos) {
      return "?";
    }
    const auto end = text.find_first_of("\r\n", at);
    return text.substr(at + needle.size(), end - at - needle.size());
  };
  auto info = send(masters.front().first, {"INFO", "server"}, false, step_deadline(deadline), k_small_reply);
  if (!info) {
    return tl::unexpected(info.error());
  }
  auto state = send(masters.front().first, {"CLUSTER", "INFO"}, false, step_deadline(deadline), k_small_reply);
  if (!state) {
    return tl::unexpected(state.error());
  }
  std::string out = fmt::format("redis {} (cluster, state {}): {} master{}", field(info->str, "redis_version"),
                                field(state->str, "cluster_state"), masters.size(), masters.size() == 1 ? "" : "s");
  for (const auto& [node, slots] : masters) {
    out += fmt::format(" {} [{}]", node.address(), slots);
  }
  out += fmt::format(", {} replica{}", replicas, replicas == 1 ? "" : "s");
  return out;
}

Result<void> RedisClusterBackend::list(std::string_view prefix,
                                       const std::function<bool(std::string_view name)>& each) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(m_spec.connect_timeout_ms + 2 * std::uint64_t{m_spec.timeout_ms});
  if (auto r = refresh(deadline); !r) {
    return tl::unexpected(r.error());
  }
  std::vector<ClusterNode> masters;
  {
    std::lock_guard lock(m_mutex);
    for (const std::uint16_t index : m_slots) {
      if (index != k_no_node && std::find(masters.begin(), masters.end(), m_nodes[index]) == masters.end()) {
        masters.push_back(m_nodes[index]);
      }
    }
  }
  bool go_on = true;
  for (const ClusterNode& node : masters) {
    const std::string where = fmt::format("{} (node {})", m_spec.masked(), node.address());
    auto r = redis_scan_objects(
        [&](const std::vector<std::string_view>& argv, std::uint64_t max_bulk) {
          // Each SCAN batch gets a whole data operation's deadline.
          return send(node, argv, false, step_deadline(data_operation().deadline), max_bulk);
        },
        prefix,
        [&](std::string_view name) { return go_on = each(name); }, where);
    if (!r) {
      return r;
    }
    if (!go_on) {
      break;
    }
  }
  return {};
}

ClusterNode RedisClusterBackend::master_of(int slot) {
  bool loaded = false;
  {
    std::lock_guard lock(m_mutex);
    loaded = m_loaded;
  }
  if (!loaded) {
    (void)refresh(data_operation().deadline);
  }
  std::lock_guard lock(m_mutex);
  if (slot < 0 || slot >= k_cluster_slots || m_slots[slot] == k_no_node) {
    return {};
  }
  return m_nodes[m_slots[slot]];
}

ClusterRoutingStats RedisClusterBackend::routing_stats() const {
  std::lock_guard lock(m_mutex);
  return m_stats;
}

Result<std::optional<LeaseInfo>> RedisClusterBackend::lease_inspect(std::string_view name) {
  // A waiter's poll: rides out a failover as lease_take does.
  return redis_lease_inspect(sender(name, lease_operation(m_lease_ttl_ms.load(), RideOut::failover)), name,
                             m_spec.masked());
}

Result<bool> RedisClusterBackend::lease_take_foreign(std::string_view name, std::string_view seen,
                                                     std::string_view token, std::uint64_t ttl_ms) {
  m_lease_ttl_ms.store(ttl_ms);
  auto r = redis_lease_take_foreign(sender(name, lease_operation(ttl_ms, RideOut::failover)), name, seen, token,
                                    ttl_ms, m_spec.masked());
  if (r && *r) {
    held_leases().hold(name, ttl_ms);
  }
  return r;
}

}  // namespace kcache::remote
