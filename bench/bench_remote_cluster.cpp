// bench_remote_cluster: many clients, each a real process, doing remote
// lookups against one standalone Redis and against a Redis Cluster of 3
// masters, in the same run, with the servers' own CPU:
//
//   kcache_hit  RemoteStore::get, a remote hit as `kcache` takes it: slot
//               routing, GETRANGE, then zstd, HMAC, payload SHA-256 and the key
//               recomputed from the key record
//   raw_get     the raw baseline: a plain GET of the same object bytes on a
//               RedisConnection (on the cluster sent to the slot's master),
//               nothing decoded or verified
//
// Each run forks `clients` processes. Each opens its own remote (as a kcache
// process would), looks up 32 entries to connect (to every master of a
// cluster), and waits; then all start at once and each looks up 1000 distinct
// 16 KiB entries (signed, zstd; 1000 entries on the server) and sends its
// per-lookup latencies to the parent on a pipe. Counters:
//   items_per_second     lookups of all clients together per second of wall
//                        time (start signal to the last client's end)
//   p50_us, p99_us       over every lookup of every client
//   srv_cpu_ms_per_1k    the servers' CPU (INFO cpu: used_cpu_user +
//                        used_cpu_sys, all threads; summed over the standalone
//                        server or the cluster's masters) per 1000 lookups
//   srv_cpu_frac         the same CPU as a fraction of the wall time (1 = one
//                        core busy)
//   srv_main_ms_per_1k, srv_main_frac   the main threads' share of it
//                        (used_cpu_*_main_thread; absent before Redis 6)
//   srv_idle_frac        the servers' CPU at rest (cron, cluster bus) as a
//                        fraction of wall time, measured over one second once
//                        per server set: the part of srv_cpu_frac that is not
//                        the lookups'
//
//   scripts/bench-redis-cluster.sh start   # standalone on 6499, cluster on 7201-7206
//   build/ci/bench/bench_remote_cluster --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   scripts/bench-redis-cluster.sh stop
//
// KCACHE_BENCH_REDIS (default redis://127.0.0.1:6499) and KCACHE_BENCH_CLUSTER
// (default redis+cluster://127.0.0.1:7201,127.0.0.1:7202) name other servers.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "remote_entries.hpp"
#include "store/remote/redis_backend.hpp"
#include "store/remote/redis_cluster_backend.hpp"
#include "store/remote/redis_connection.hpp"
#include "store/remote/remote_store.hpp"

namespace {

using namespace kcache;
namespace kr = kcache::remote;
using Clock = std::chrono::steady_clock;

constexpr int k_entries = 1000;
constexpr int k_lookups = 1000;  // per client
constexpr std::size_t k_entry_size = 16 << 10;
constexpr int k_warm_up = 32;  // lookups before the start, per client (about 1 in 100 000 misses a master)

enum class Path { raw_get, kcache_hit };

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string standalone_url() { return env_or("KCACHE_BENCH_REDIS", "redis://127.0.0.1:6499"); }
std::string cluster_url() {
  return env_or("KCACHE_BENCH_CLUSTER", "redis+cluster://127.0.0.1:7201,127.0.0.1:7202");
}

kr::RemoteStoreOptions store_options(const kr::RemoteSpec& spec) {
  kr::RemoteStoreOptions o;
  o.spec = spec;
  o.codec = bench::remote_codec();
  o.warn = [](const std::string&) {};
  return o;
}

// The keys of the entries on the server at `url`, written once per process
// (untimed). Empty when the server cannot be written.
const std::vector<Key>& entries_on(const std::string& url) {
  static std::map<std::string, std::vector<Key>> all;
  auto [it, added] = all.try_emplace(url);
  if (!added) {
    return it->second;
  }
  auto spec = kr::parse_remote_url(url);
  if (!spec) {
    return it->second;
  }
  auto store = kr::RemoteStore::open(store_options(*spec));
  if (!store) {
    return it->second;
  }
  std::vector<Key> keys;
  for (int i = 0; i < k_entries; ++i) {
    const Artifact a = bench::make_remote_entry(k_entry_size, i + 1);
    if (!(*store)->put(a)) {
      return it->second;
    }
    keys.push_back(a.passport.key);
  }
  it->second = std::move(keys);
  return it->second;
}

// One client's lookups: the kcache hit path or the raw GET of the same object.
class Client {
 public:
  Client(const kr::RemoteSpec& spec, Path path) : m_path(path) {
    if (path == Path::kcache_hit) {
      if (auto s = kr::RemoteStore::open(store_options(spec))) {
        m_store = std::move(*s);
      }
    } else if (spec.scheme == kr::Scheme::redis_cluster) {
      if (auto c = kr::RedisClusterBackend::open(spec)) {
        m_cluster = std::move(*c);
      }
    } else {
      m_single = std::make_unique<kr::RedisBackend>(spec);
    }
  }

  // True when the entry came back (a verified hit, or the object's bytes).
  bool lookup(const Key& key) {
    if (m_path == Path::kcache_hit) {
      auto got = m_store ? m_store->get(key) : Result<std::optional<Artifact>>(std::nullopt);
      return got && got->has_value();
    }
    if (m_cluster == nullptr && m_single == nullptr) {
      return false;
    }
    const std::string name = kr::object_name(key);
    auto r = m_cluster ? m_cluster->command_for_key(name, {"GET", name}) : m_single->command({"GET", name});
    return r && r->type == kr::RedisReply::Type::string && !r->str.empty();
  }

 private:
  Path m_path;
  std::unique_ptr<kr::RemoteStore> m_store;
  std::unique_ptr<kr::RedisClusterBackend> m_cluster;
  std::unique_ptr<kr::RedisBackend> m_single;
};

// The value of `name` in INFO output, or nothing.
std::optional<double> info_value(const std::string& info, const std::string& name) {
  const std::string needle = "\n" + name + ":";
  const auto at = ("\n" + info).find(needle);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  return std::strtod(info.c_str() + at + needle.size() - 1, nullptr);
}

// CPU seconds the servers have used so far: all threads, and main threads.
struct ServerCpu {
  double all = 0;
  double main = 0;
  bool has_main = true;
};

// The servers a run loads: the standalone server, or every master of the
// cluster (from its slot map).
std::vector<std::unique_ptr<kr::RedisConnection>> servers_of(const kr::RemoteSpec& spec) {
  std::set<std::pair<std::string, int>> addresses;
  if (spec.scheme == kr::Scheme::redis_cluster) {
    auto cluster = kr::RedisClusterBackend::open(spec);
    for (int slot = 0; cluster && slot < kr::k_cluster_slots; ++slot) {
      const kr::ClusterNode n = (*cluster)->master_of(slot);
      if (!n.host.empty()) {
        addresses.emplace(n.host, n.port);
      }
    }
  } else {
    addresses.emplace(spec.host, spec.port);
  }
  std::vector<std::unique_ptr<kr::RedisConnection>> out;
  for (const auto& [host, port] : addresses) {
    if (auto c = kr::RedisConnection::connect(spec, host, port)) {
      out.push_back(std::move(*c));
    }
  }
  return out;
}

std::optional<ServerCpu> server_cpu(std::vector<std::unique_ptr<kr::RedisConnection>>& servers) {
  ServerCpu total;
  for (auto& c : servers) {
    auto r = c->command({"INFO", "cpu"});
    if (!r || r->type == kr::RedisReply::Type::error) {
      return std::nullopt;
    }
    const auto user = info_value(r->str, "used_cpu_user");
    const auto sys = info_value(r->str, "used_cpu_sys");
    if (!user || !sys) {
      return std::nullopt;
    }
    total.all += *user + *sys;
    const auto main_user = info_value(r->str, "used_cpu_user_main_thread");
    const auto main_sys = info_value(r->str, "used_cpu_sys_main_thread");
    total.has_main = total.has_main && main_user && main_sys;
    total.main += main_user.value_or(0) + main_sys.value_or(0);
  }
  return total;
}

// Runs in a forked child: connects, says it is ready, waits for the start
// (EOF on `go`), looks up, writes its latencies (ns, u32 each) to `out`.
[[noreturn]] void run_client(const kr::RemoteSpec& spec, Path path, const std::vector<Key>& keys, int index,
                             int ready, int go, int out) {
  Client client(spec, path);
  // Untimed: connect (on the cluster: load the slot map and reach every master).
  bool connected = true;
  for (int j = 0; j < k_warm_up; ++j) {
    connected = client.lookup(keys[static_cast<std::size_t>(index + j * 31) % keys.size()]) && connected;
  }
  const char byte = connected ? 'r' : 'x';
  if (::write(ready, &byte, 1) != 1 || !connected) {
    ::_exit(1);
  }
  char none = 0;
  while (::read(go, &none, 1) > 0) {
  }
  std::vector<std::uint32_t> ns(k_lookups);
  bool ok = true;
  for (int j = 0; j < k_lookups; ++j) {
    const auto start = Clock::now();
    ok = client.lookup(keys[static_cast<std::size_t>(index * 97 + j) % keys.size()]) && ok;
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    ns[static_cast<std::size_t>(j)] = static_cast<std::uint32_t>(std::min<long long>(took, UINT32_MAX));
  }
  const auto* p = reinterpret_cast<const char*>(ns.data());
  std::size_t left = ns.size() * sizeof(std::uint32_t);
  while (left > 0) {
    const ssize_t n = ::write(out, p, left);
    if (n <= 0) {
      ::_exit(1);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::_exit(ok ? 0 : 2);
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its latency pipe
};

// The servers' CPU at rest, as a fraction of wall time, measured over one
// second once per `url`; nothing when INFO cpu cannot be read.
std::optional<double> idle_fraction(const std::string& url,
                                    std::vector<std::unique_ptr<kr::RedisConnection>>& servers) {
  static std::map<std::string, std::optional<double>> measured;
  auto [it, added] = measured.try_emplace(url);
  if (added) {
    const auto before = server_cpu(servers);
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto after = server_cpu(servers);
    if (before && after) {
      it->second = (after->all - before->all) / std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  return it->second;
}

void many_clients(benchmark::State& state, const std::string& url, Path path) {
  const int clients = static_cast<int>(state.range(0));
  const auto spec = kr::parse_remote_url(url);
  const std::vector<Key>& keys = entries_on(url);
  if (!spec || keys.empty()) {
    state.SkipWithError(("cannot write to " + url + "; is it running? (scripts/bench-redis-cluster.sh start)").c_str());
    return;
  }
  auto servers = servers_of(*spec);
  const auto idle = idle_fraction(url, servers);
  for (auto _ : state) {
    int ready[2], go[2];
    if (::pipe(ready) != 0 || ::pipe(go) != 0) {
      state.SkipWithError("pipe");
      return;
    }
    std::vector<Child> children;
    for (int i = 0; i < clients; ++i) {
      int out[2];
      if (::pipe(out) != 0) {
        break;
      }
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(ready[0]);
        ::close(go[1]);
        ::close(out[0]);
        run_client(*spec, path, keys, i, ready[1], go[0], out[1]);
      }
      ::close(out[1]);
      children.push_back({pid, out[0]});
    }
    ::close(ready[1]);
    ::close(go[0]);
    // One byte from each client: 'r' connected (it then waits), 'x' failed.
    int answered = 0, connected = 0;
    for (char c = 0; answered < static_cast<int>(children.size()) && ::read(ready[0], &c, 1) == 1; ++answered) {
      connected += c == 'r' ? 1 : 0;
    }
    const auto before = server_cpu(servers);
    const auto start = Clock::now();
    ::close(go[1]);  // EOF: every client starts
    std::vector<std::uint32_t> ns;
    ns.reserve(static_cast<std::size_t>(clients) * k_lookups);
    for (const Child& c : children) {
      std::vector<std::uint32_t> part(k_lookups);
      auto* p = reinterpret_cast<char*>(part.data());
      std::size_t got = 0;
      while (got < part.size() * sizeof(std::uint32_t)) {
        const ssize_t n = ::read(c.out, p + got, part.size() * sizeof(std::uint32_t) - got);
        if (n <= 0) {
          break;
        }
        got += static_cast<std::size_t>(n);
      }
      ns.insert(ns.end(), part.begin(), part.begin() + static_cast<std::ptrdiff_t>(got / sizeof(std::uint32_t)));
      ::close(c.out);
    }
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const auto after = server_cpu(servers);
    ::close(ready[0]);
    bool ok = connected == clients && static_cast<int>(children.size()) == clients;
    for (const Child& c : children) {
      int st = 0;
      ok = ::waitpid(c.pid, &st, 0) == c.pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 && ok;
    }
    if (!ok || ns.size() != static_cast<std::size_t>(clients) * k_lookups) {
      state.SkipWithError("a client failed (a lookup missed or the server went away)");
      return;
    }
    state.SetIterationTime(wall);
    std::sort(ns.begin(), ns.end());
    const double lookups = static_cast<double>(ns.size());
    state.counters["p50_us"] = ns[ns.size() / 2] / 1e3;
    state.counters["p99_us"] = ns[ns.size() * 99 / 100] / 1e3;
    if (before && after) {
      state.counters["srv_cpu_ms_per_1k"] = (after->all - before->all) * 1e3 / (lookups / 1e3);
      state.counters["srv_cpu_frac"] = (after->all - before->all) / wall;
      if (idle) {
        state.counters["srv_idle_frac"] = *idle;
      }
      if (after->has_main) {
        state.counters["srv_main_ms_per_1k"] = (after->main - before->main) * 1e3 / (lookups / 1e3);
        state.counters["srv_main_frac"] = (after->main - before->main) / wall;
      }
    }
    state.counters["servers"] = static_cast<double>(servers.size());
    state.SetItemsProcessed(static_cast<std::int64_t>(ns.size()));
  }
}

void BM_Standalone(benchmark::State& state, Path path) { many_clients(state, standalone_url(), path); }
void BM_Cluster(benchmark::State& state, Path path) { many_clients(state, cluster_url(), path); }

}  // namespace

BENCHMARK_CAPTURE(BM_Standalone, raw_get, Path::raw_get)->Arg(1)->Arg(16)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Standalone, kcache_hit, Path::kcache_hit)->Arg(1)->Arg(16)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Cluster, raw_get, Path::raw_get)->Arg(1)->Arg(16)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Cluster, kcache_hit, Path::kcache_hit)->Arg(1)->Arg(16)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
