// TieredStore: asks tiers in order, fills upper tiers on a lower hit, and
// treats a failing tier as absent for that operation (counted, warned once).
#include "kcache/tiered_store.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace kcache {

namespace {
thread_local int t_last_hit_tier = -1;
thread_local bool t_tracing = false;
thread_local std::vector<TierLookup> t_trace;
using TraceClock = std::chrono::steady_clock;

void trace(const std::string& location, TraceClock::time_point start, TierLookup::Outcome outcome) {
  if (t_tracing) {
    t_trace.push_back(TierLookup{
        location,
        static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(TraceClock::now() - start).count()),
        outcome});
  }
}
}  // namespace

struct TieredStore::Impl {
  struct Tier {
    std::unique_ptr<Store> store;
    std::atomic<std::uint64_t> failures{0};
    std::once_flag warned;
    std::string location;  // set_tier_location
  };

  // Counts a failure of tier `index` and warns the first time.
  void failed(std::size_t index, std::string_view operation, const Error& error) {
    Tier& t = *tiers[index];
    t.failures.fetch_add(1, std::memory_order_relaxed);
    std::call_once(t.warned, [&] {
      std::string line = "cache tier '" + std::string(t.store->name()) + "' failed (" +
                         std::string(operation) + ": " + error.describe() +
                         "); skipping it where it fails, compiles go on without it";
      if (warn) {
        warn(line);
      } else {
        std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
      }
    });
  }

  std::vector<std::unique_ptr<Tier>> tiers;
  std::function<void(const std::string&)> warn;
  std::atomic<std::uint64_t> hits{0};
  std::atomic<std::uint64_t> misses{0};
  std::atomic<std::uint64_t> compile_us_saved{0};
};

TieredStore::TieredStore(std::vector<std::unique_ptr<Store>> tiers,
                         std::function<void(const std::string&)> warn)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->warn = std::move(warn);
  for (auto& store : tiers) {
    auto tier = std::make_unique<Impl::Tier>();
    tier->store = std::move(store);
    tier->location = tier->store->name() == "file" ? std::string("local") : std::string(tier->store->name());
    m_impl->tiers.push_back(std::move(tier));
  }
}

TieredStore::~TieredStore() {
  // Slowest first: a remote tier (and its write-behind queue) may stream
  // into the file tier above it until it is gone.
  while (!m_impl->tiers.empty()) {
    m_impl->tiers.pop_back();
  }
}

Result<std::optional<Artifact>> TieredStore::get(const Key& key) { return get_into(key, {}); }

Result<std::optional<Artifact>> TieredStore::get_into(const Key& key, const PayloadAllocator& allocate) {
  return look_up<std::optional<Artifact>>(key, [&](Store& tier) { return tier.get_into(key, allocate); });
}

Result<std::shared_ptr<const Artifact>> TieredStore::get_shared(const Key& key) {
  return look_up<std::shared_ptr<const Artifact>>(key, [&](Store& tier) { return tier.get_shared(key); });
}

template <class Held, class Ask>
Result<Held> TieredStore::look_up(const Key& key, const Ask& ask) {
  t_last_hit_tier = -1;
  note_served_tier(std::nullopt);
  std::size_t failed = 0;
  Error last_error;
  for (std::size_t i = 0; i < m_impl->tiers.size(); ++i) {
    const auto start = t_tracing ? TraceClock::now() : TraceClock::time_point{};
    Result<Held> got = ask(*m_impl->tiers[i]->store);
    if (t_tracing) {
      trace(m_impl->tiers[i]->location, start,
            !got                        ? TierLookup::Outcome::error
            : static_cast<bool>(*got)   ? TierLookup::Outcome::hit
                                        : TierLookup::Outcome::miss);
    }
    if (!got) {
      m_impl->failed(i, "get", got.error());
      ++failed;
      last_error = std::move(got.error());
      continue;
    }
    if (!*got) {
      continue;
    }
    if ((*got)->passport.key != key) {
      // Each tier checks an entry's identity before returning it
      // (check_entry_identity); one that hands back another key's entry is
      // broken, and its answer is neither filled upward nor returned.
      m_impl->failed(i, "get", Error{ErrorCode::corrupt, "it returned the entry of another key", {}});
      ++failed;
      continue;
    }
    for (std::size_t upper = 0; upper < i; ++upper) {
      if (auto filled = m_impl->tiers[upper]->store->fill(**got); !filled) {
        m_impl->failed(upper, "fill", filled.error());
      }
    }
    m_impl->hits.fetch_add(1, std::memory_order_relaxed);
    m_impl->compile_us_saved.fetch_add((*got)->passport.compile_duration_us,
                                       std::memory_order_relaxed);
    t_last_hit_tier = static_cast<int>(i);
    // A tier that is itself a chain noted its own tier; a single store is its own.
    if (const auto kind = m_impl->tiers[i]->store->tier_kind()) {
      note_served_tier(kind);
    }
    return got;
  }
  if (failed == m_impl->tiers.size() && failed > 0) {
    return tl::unexpected(std::move(last_error));
  }
  m_impl->misses.fetch_add(1, std::memory_order_relaxed);
  return Held{};
}

void TieredStore::set_tier_location(std::size_t index, std::string location) {
  m_impl->tiers[index]->location = std::move(location);
}

void TieredStore::start_lookup_trace() {
  t_trace.clear();
  t_tracing = true;
}

std::vector<TierLookup> TieredStore::take_lookup_trace() {
  t_tracing = false;
  return std::exchange(t_trace, {});
}

Result<PutOutcome> TieredStore::put(const Artifact& artifact) { return put_then(artifact, {}); }

namespace {

// Calls `done` once the last of the tiers' callbacks (and the caller's own
// count, dropped when the outcome is known) has come in.
struct PutCountdown {
  std::mutex mutex;
  std::size_t left = 1;  // the caller's
  Result<PutOutcome> outcome = PutOutcome::stored;
  PutDone done;

  void arrive() {
    std::unique_lock lock(mutex);
    if (--left > 0) {
      return;
    }
    lock.unlock();
    done(outcome);
  }
};

}  // namespace

Result<PutOutcome> TieredStore::put_then(const Artifact& artifact, PutDone done) {
  std::shared_ptr<PutCountdown> countdown;
  if (done) {
    countdown = std::make_shared<PutCountdown>();
    countdown->done = std::move(done);
  }
  // Sets the final outcome and lets `done` run once every tier has answered.
  auto finish = [&](Result<PutOutcome> outcome) -> Result<PutOutcome> {
    if (countdown) {
      {
        std::lock_guard lock(countdown->mutex);
        countdown->outcome = outcome;
      }
      countdown->arrive();
    }
    return outcome;
  };
  auto tier_done = [&]() -> PutDone {
    if (!countdown) {
      return {};
    }
    {
      std::lock_guard lock(countdown->mutex);
      ++countdown->left;
    }
    return [countdown](const Result<PutOutcome>&) { countdown->arrive(); };
  };
  std::size_t failed = 0;
  PutOutcome outcome = PutOutcome::stored;
  Error last_error;
  bool answered = false;
  std::size_t writable = 0;
  for (std::size_t i = 0; i < m_impl->tiers.size(); ++i) {
    if (!m_impl->tiers[i]->store->writable()) {
      continue;  // a read-only tier (a read_only remote) is never sent a write
    }
    ++writable;
    auto put = m_impl->tiers[i]->store->put_then(artifact, tier_done());
    if (!put) {
      // An artifact that does not verify is the caller's error, not the tier's
      // (MemoryStore says corrupt, FileStore invalid_argument).
      if (put.error().code == ErrorCode::corrupt || put.error().code == ErrorCode::invalid_argument) {
        return finish(tl::unexpected(std::move(put.error())));
      }
      m_impl->failed(i, "put", put.error());
      ++failed;
      last_error = std::move(put.error());
      continue;
    }
    // The lowest tier that answers is the most durable: its outcome is the
    // chain's, except that a tier publishing later (a remote behind a
    // write-behind queue) does not hide what a local tier did now.
    if (*put != PutOutcome::queued || !answered) {
      outcome = *put;
    }
    answered = true;
  }
  if (failed == writable && failed > 0) {
    return finish(tl::unexpected(std::move(last_error)));
  }
  return finish(outcome);
}

Result<bool> TieredStore::remove(const Key& key) {
  std::size_t failed = 0;
  bool removed = false;
  Error last_error;
  for (std::size_t i = 0; i < m_impl->tiers.size(); ++i) {
    auto r = m_impl->tiers[i]->store->remove(key);
    if (!r) {
      m_impl->failed(i, "remove", r.error());
      ++failed;
      last_error = std::move(r.error());
      continue;
    }
    removed = removed || *r;
  }
  if (failed == m_impl->tiers.size() && failed > 0) {
    return tl::unexpected(std::move(last_error));
  }
  return removed;
}

Result<std::vector<EntryInfo>> TieredStore::list() {
  std::vector<EntryInfo> out;
  std::unordered_map<Key, std::size_t, KeyHash> index;
  std::size_t failed = 0;
  Error last_error;
  for (std::size_t i = 0; i < m_impl->tiers.size(); ++i) {
    auto entries = m_impl->tiers[i]->store->list();
    if (!entries) {
      m_impl->failed(i, "list", entries.error());
      ++failed;
      last_error = std::move(entries.error());
      continue;
    }
    for (auto& e : *entries) {
      const auto [it, inserted] = index.emplace(e.key, out.size());
      if (inserted) {
        out.push_back(std::move(e));
      } else {
        // The same key in a slower tier: the fastest tier's facts stand, but
        // a pin lives only in the file tier, so one seen anywhere counts.
        EntryInfo& seen = out[it->second];
        seen.last_used_unix_ms = std::max(seen.last_used_unix_ms, e.last_used_unix_ms);
        seen.pinned = seen.pinned || e.pinned;
      }
    }
  }
  if (failed == m_impl->tiers.size() && failed > 0) {
    return tl::unexpected(std::move(last_error));
  }
  return out;
}

Result<StoreStats> TieredStore::stats() {
  StoreStats sum;
  std::size_t failed = 0;
  Error last_error;
  for (std::size_t i = 0; i < m_impl->tiers.size(); ++i) {
    auto s = m_impl->tiers[i]->store->stats();
    if (!s) {
      m_impl->failed(i, "stats", s.error());
      ++failed;
      last_error = std::move(s.error());
      continue;
    }
    sum.puts += s->puts;
    sum.puts_skipped += s->puts_skipped;
    sum.evictions += s->evictions;
    sum.corrupt += s->corrupt;
    sum.errors += s->errors;
    sum.bytes_read += s->bytes_read;
    sum.bytes_written += s->bytes_written;
    sum.temp_files += s->temp_files;
    sum.temp_bytes += s->temp_bytes;
    sum.stale_temp_files += s->stale_temp_files;
    sum.stale_temp_bytes += s->stale_temp_bytes;
    // Every entry of an upper tier is (or was) also in the largest local
    // tier: its occupancy is the chain's. A remote tier reports none (the
    // server owns its occupancy), so it never replaces the file tier's.
    if (!s->remote) {
      sum.entries = s->entries;
      sum.size_bytes = s->size_bytes;
      sum.max_size_bytes = s->max_size_bytes;
      sum.pinned_entries = s->pinned_entries;
      sum.pinned_bytes = s->pinned_bytes;
      sum.pins_over_cap = s->pins_over_cap;
    }
  }
  if (failed == m_impl->tiers.size() && failed > 0) {
    return tl::unexpected(std::move(last_error));
  }
  sum.hits = m_impl->hits.load(std::memory_order_relaxed);
  sum.misses = m_impl->misses.load(std::memory_order_relaxed);
  sum.compile_us_saved = m_impl->compile_us_saved.load(std::memory_order_relaxed);
  for (const auto& t : m_impl->tiers) {
    sum.errors += t->failures.load(std::memory_order_relaxed);
  }
  return sum;
}

int TieredStore::last_hit_tier() noexcept { return t_last_hit_tier; }

RequestStats* TieredStore::request_stats() noexcept {
  for (const auto& t : m_impl->tiers) {
    if (RequestStats* r = t->store->request_stats()) {
      return r;
    }
  }
  return nullptr;
}

std::size_t TieredStore::tier_count() const noexcept { return m_impl->tiers.size(); }

Store& TieredStore::tier(std::size_t index) noexcept { return *m_impl->tiers[index]->store; }

std::uint64_t TieredStore::tier_failures(std::size_t index) const noexcept {
  return m_impl->tiers[index]->failures.load(std::memory_order_relaxed);
}

}  // namespace kcache
