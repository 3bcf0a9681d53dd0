#include "store/remote/redis_lease.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "util/hex.hpp"
#include "util/random_bytes.hpp"

namespace kcache::remote {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto k_first_poll = std::chrono::milliseconds(5);
constexpr auto k_max_poll = std::chrono::milliseconds(50);

// "<hostname>:<pid>:<16 random hex>": names the owner in `redis-cli GET`, and
// is unique per process even across hosts with one hostname.
std::string make_token() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) {
    host[0] = '\0';
  }
  // getrandom(2), not std::random_device (arc4random in GCC 12's static
  // libstdc++: glibc 2.36, docs/install.md); host and pid alone should it fail.
  std::array<std::uint8_t, 8> r{};
  const std::string suffix = util::random_bytes(r.data(), r.size(), "a lease token")
                                 ? ":" + util::to_hex(r.data(), r.size())
                                 : std::string();
  return std::string(host.data()) + ":" + std::to_string(::getpid()) + suffix;
}

}  // namespace

RedisLease::RedisLease(std::unique_ptr<RemoteStore> store, RedisLeaseOptions options)
    : m_store(std::move(store)), m_options(std::move(options)), m_token(make_token()) {}

RedisLease::~RedisLease() {
  std::vector<Key> held;
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
    held.assign(m_held.begin(), m_held.end());
  }
  m_wake.notify_all();
  if (m_heartbeat.joinable()) {
    m_heartbeat.join();
  }
  for (const Key& key : held) {
    release(key);
  }
}

void RedisLease::count(RemoteCounter counter, std::uint64_t RedisLeaseStats::*field) {
  m_store->breaker().counters().add(counter);
  std::lock_guard lock(m_mutex);
  ++(m_stats.*field);
}

RedisLeaseStats RedisLease::stats() const {
  std::lock_guard lock(m_mutex);
  return m_stats;
}

void RedisLease::hold(const Key& key) {
  std::lock_guard lock(m_mutex);
  m_held.insert(key);
  if (!m_heartbeat.joinable() && !m_stop) {
    try {
      m_heartbeat = std::thread([this] { heartbeat(); });
    } catch (const std::system_error&) {  // NOLINT(bugprone-empty-catch)
      // No thread: the lease is not renewed and may expire during a long
      // compile; then another host compiles too (twice, never wrong bytes).
    }
  }
}

std::string RedisLease::stall_line(const Key& key, const LeaseInfo* info, Clock::duration left) const {
  const auto secs = [](auto d) {
    return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
  };
  const std::string where = m_store->spec().masked();
  const std::string wait = secs(left);
  if (info == nullptr) {
    return fmt::format("waiting for another host compiling key {} (its lease on {}); waiting up to {} more before "
                       "compiling it here",
                       key.hex(), where, wait);
  }
  // The value comes from the server: shown printable and short.
  std::string who;
  for (char c : info->value.substr(0, 80)) {
    who += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (is_foreign(*info)) {
    return fmt::format("key {}: its lease on {} holds \"{}\" with {} (not a kcache lease: kcache's expire within "
                       "remote_lease_ttl_ms); it is taken over in {} unless it changes",
                       key.hex(), where, who,
                       info->pttl_ms < 0 ? std::string("no expiry") : fmt::format("{} ms to live", info->pttl_ms),
                       secs(std::chrono::milliseconds(m_options.ttl_ms)));
  }
  return fmt::format("waiting for {} compiling key {} (lease on {}; it expires in {} unless its owner renews it); "
                     "waiting up to {} more before compiling it here",
                     who, key.hex(), where, secs(std::chrono::milliseconds(std::max<std::int64_t>(0, info->pttl_ms))),
                     wait);
}

bool RedisLease::is_foreign(const LeaseInfo& info) const noexcept {
  return info.pttl_ms == -1 || (info.pttl_ms > 0 && static_cast<std::uint64_t>(info.pttl_ms) > m_options.ttl_ms);
}

RemoteLeaseOutcome RedisLease::acquire(const Key& key, const std::function<bool()>& peek) {
  const auto begin = Clock::now();
  const auto deadline = begin + std::chrono::milliseconds(m_options.wait_ms);
  bool waited = false;
  auto poll = k_first_poll;
  // What the lease held when inspected (after stall_notice), and since when:
  // a foreign lease that keeps its value for ttl_ms is taken over.
  std::optional<LeaseInfo> holder;
  Clock::time_point holder_since{};
  bool inspected = false;
  for (;;) {
    auto taken = m_store->lease_take(key, m_token, m_options.ttl_ms);
    bool foreign_taken = false;
    if (taken && !*taken && holder && is_foreign(*holder) &&
        Clock::now() - holder_since >= std::chrono::milliseconds(m_options.ttl_ms)) {
      taken = m_store->lease_take_foreign(key, holder->value, m_token, m_options.ttl_ms);
      foreign_taken = taken && *taken;
      if (taken && !*taken) {
        inspected = false;  // it changed: look at it again
      }
    }
    if (!taken) {
      count(RemoteCounter::lease_errors, &RedisLeaseStats::errors);
      return RemoteLeaseOutcome::unavailable;
    }
    if (*taken) {
      hold(key);
      count(RemoteCounter::lease_taken, &RedisLeaseStats::taken);
      if (foreign_taken) {
        count(RemoteCounter::lease_foreign_takeovers, &RedisLeaseStats::foreign_takeovers);
      }
      // The owner we waited for released: it published (look once more), or
      // failed or died (its lease expired): then we compile. Without a wait,
      // another host may still have published and released between the
      // caller's last look and this SET: one EXISTS tells.
      bool look = waited;
      if (!look) {
        auto there = m_store->exists(key);
        look = there && *there;
      }
      if (look && peek && peek()) {
        release(key);
        if (waited) {
          count(RemoteCounter::lease_waited_hits, &RedisLeaseStats::waited_hits);
        }
        return RemoteLeaseOutcome::published;
      }
      if (waited) {
        count(RemoteCounter::lease_takeovers, &RedisLeaseStats::takeovers);
      }
      return RemoteLeaseOutcome::owner;
    }
    if (!waited) {
      waited = true;
      count(RemoteCounter::lease_waits, &RedisLeaseStats::waits);
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      count(RemoteCounter::lease_timeouts, &RedisLeaseStats::timeouts);
      return RemoteLeaseOutcome::timed_out;
    }
    if (!inspected && now - begin >= m_options.stall_notice) {
      // A stall says why: who holds the key, and how long this may wait.
      inspected = true;
      auto info = m_store->lease_inspect(key);
      const bool first = !holder.has_value() && holder_since == Clock::time_point{};
      std::optional<LeaseInfo> next = info ? *info : std::nullopt;
      if (!holder || !next || next->value != holder->value) {
        holder_since = Clock::now();
      }
      holder = std::move(next);
      if (first) {
        count(RemoteCounter::lease_stalls, &RedisLeaseStats::stalls);
        const std::string line = stall_line(key, holder ? &*holder : nullptr, deadline - now);
        if (m_options.stall) {
          m_options.stall(line);
        } else {
          std::fprintf(stderr, "kcache: %s\n", line.c_str());
        }
      }
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(poll, deadline - now));
    poll = std::min(poll * 2, k_max_poll);
    // The owner publishes before it releases: EXISTS sees its entry first.
    // (An error here is left to the next SET, which then answers unavailable.)
    if (auto there = m_store->exists(key); there && *there && peek && peek()) {
      count(RemoteCounter::lease_waited_hits, &RedisLeaseStats::waited_hits);
      return RemoteLeaseOutcome::published;
    }
  }
}

void RedisLease::release(const Key& key) noexcept {
  {
    std::lock_guard lock(m_mutex);
    if (m_held.erase(key) == 0) {
      return;
    }
  }
  // A failure leaves the lease to expire after its ttl (counted by the breaker).
  (void)m_store->lease_release(key, m_token);
}

void RedisLease::heartbeat() {
  const auto every = std::chrono::milliseconds(std::max<std::uint64_t>(1, m_options.ttl_ms / 3));
  std::unique_lock lock(m_mutex);
  while (!m_stop) {
    m_wake.wait_for(lock, every);
    if (m_stop) {
      break;
    }
    const std::vector<Key> held(m_held.begin(), m_held.end());
    lock.unlock();
    for (const Key& key : held) {
      auto renewed = m_store->lease_renew(key, m_token, m_options.ttl_ms);
      if (renewed && !*renewed) {
        // Expired (a stall longer than the ttl) or taken over: keep compiling;
        // another host may compile the key too (twice, never wrong bytes).
        {
          std::lock_guard relock(m_mutex);
          m_held.erase(key);
        }
        count(RemoteCounter::lease_lost, &RedisLeaseStats::lost);
      } else if (renewed) {
        std::lock_guard relock(m_mutex);
        ++m_stats.renewals;
      }
    }
    lock.lock();
  }
}

}  // namespace kcache::remote
