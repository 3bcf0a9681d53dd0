// WriteBehindStore: a FIFO of queued artifacts drained by one background
// thread, a map from key to the queued artifact for read-your-writes, and a
// byte budget that makes producers wait. See include/kcache/write_behind_store.hpp.
#include "kcache/write_behind_store.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "util/clock.hpp"

namespace kcache {

namespace {

using util::Clock;
using util::micros_since;

// What a queued artifact costs the budget: the bytes it holds that can be large.
std::uint64_t budget_bytes(const Artifact& a) { return a.payload.size() + a.passport.log.size(); }

enum class PutKind { put, fill };

}  // namespace

struct WriteBehindStore::Impl {
  struct Item {
    // Shared with `pending`, so get() can copy it while the thread writes it.
    std::shared_ptr<const Artifact> artifact;
    PutKind kind = PutKind::put;
    PutDone done;
    std::uint64_t bytes = 0;
  };
  struct Pending {
    std::shared_ptr<const Artifact> artifact;  // the latest queued for the key
    unsigned count = 0;                        // how many queued items carry the key
  };

  Impl(std::unique_ptr<Store> s, WriteBehindOptions o) : inner(std::move(s)), options(std::move(o)) {
    if (options.max_pending_bytes == 0) {
      options.max_pending_bytes = 1;
    }
  }

  void warn(const std::string& line) {
    if (options.warn) {
      options.warn(line);
    } else {
      std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    }
  }

  // Runs the inner put of `item`; never throws. A put's `done` goes to the
  // inner store's put_then (which calls it, maybe later: a chain with a
  // remote tier calls it after the upload); `done` is then cleared.
  Result<PutOutcome> run_inner(Item& item) noexcept {
    try {
      if (item.kind == PutKind::fill) {
        return inner->fill(*item.artifact);
      }
      PutDone done = std::move(item.done);
      item.done = nullptr;
      return inner->put_then(*item.artifact, std::move(done));
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, std::string("background put threw: ") + e.what());
    }
  }

  static void call_done(const PutDone& done, const Result<PutOutcome>& outcome) noexcept {
    if (!done) {
      return;
    }
    try {
      done(outcome);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a callback must not end the thread
    }
  }

  // The background thread: takes items in order until stopped with an empty queue.
  void drain() {
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mutex);
        work.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) {
          return;
        }
        item = std::move(queue.front());
        queue.pop_front();
      }
      const auto t0 = Clock::now();
      const Result<PutOutcome> outcome = run_inner(item);
      const std::uint64_t us = micros_since(t0);
      bool first_failure = false;
      if (!outcome) {
        std::lock_guard lock(mutex);
        ++stats.failed;
        first_failure = !warned && options.warn_on_failure;
        warned = true;
        if (!unreported_failure) {
          unreported_failure = outcome.error();
        }
      }
      if (first_failure) {
        warn("could not publish to the " + std::string(inner->name()) + " store in the background (" +
             outcome.error().describe() + "); compiles go on, the entry is not kept, further failures are counted");
      }
      // After the inner put: the entry is published (or the put failed), so
      // whoever waits on it (a single-flight lease) may go on. (A put's done
      // went to the inner store, which has called it or will.)
      call_done(item.done, outcome);
      {
        std::lock_guard lock(mutex);
        const Key& key = item.artifact->passport.key;
        if (auto it = pending.find(key); it != pending.end() && --it->second.count == 0) {
          pending.erase(it);
        }
        pending_bytes -= item.bytes;
        stats.background_put_us += us;
        if (outcome) {
          ++stats.published;
        }
        ++done_seq;
      }
      progress.notify_all();
    }
  }

  // Queues `artifact` (already checked) for the background thread.
  Result<PutOutcome> enqueue(const Artifact& artifact, PutKind kind, PutDone done) {
    const std::uint64_t bytes = budget_bytes(artifact);
    // Outside the lock: may be large. Non-const, as Store::get_shared promises.
    std::shared_ptr<const Artifact> copy = std::make_shared<Artifact>(artifact);
    std::unique_lock lock(mutex);
    const auto has_room = [&] { return pending_bytes == 0 || pending_bytes + bytes <= options.max_pending_bytes; };
    if (!has_room()) {
      ++stats.backpressure_waits;
      const auto t0 = Clock::now();
      progress.wait(lock, has_room);
      stats.backpressure_us += micros_since(t0);
    }
    if (!thread.joinable()) {
      try {
        thread = std::thread([this] { drain(); });
      } catch (const std::system_error&) {
        // No thread to be had: publish on this one rather than lose the entry.
        lock.unlock();
        Item item{copy, kind, std::move(done), bytes};
        auto outcome = run_inner(item);
        call_done(item.done, outcome);  // a fill's
        return outcome;
      }
    }
    Pending& p = pending[artifact.passport.key];
    p.artifact = copy;
    ++p.count;
    queue.push_back(Item{std::move(copy), kind, std::move(done), bytes});
    pending_bytes += bytes;
    stats.peak_pending_bytes = std::max(stats.peak_pending_bytes, pending_bytes);
    ++stats.queued;
    ++queued_seq;
    lock.unlock();
    work.notify_one();
    return PutOutcome::queued;
  }

  Result<PutOutcome> refuse(Error error, const PutDone& done) {
    {
      std::lock_guard lock(mutex);
      ++stats.rejected;
    }
    Result<PutOutcome> outcome = tl::unexpected(std::move(error));
    call_done(done, outcome);
    return outcome;
  }

  // Waits for the queue up to `timeout`; then drops what is still queued
  // (the item in flight goes on), calls its `done` callbacks with an error and
  // warns once. Used by the destructor.
  void flush_within(std::chrono::milliseconds timeout) {
    std::deque<Item> dropped;
    {
      std::unique_lock lock(mutex);
      const std::uint64_t target = queued_seq;
      if (progress.wait_for(lock, timeout, [&] { return done_seq >= target; })) {
        return;
      }
      dropped.swap(queue);
      for (const Item& item : dropped) {
        const Key& key = item.artifact->passport.key;
        if (auto it = pending.find(key); it != pending.end() && --it->second.count == 0) {
          pending.erase(it);
        }
        pending_bytes -= item.bytes;
        ++done_seq;  // FIFO: the dropped items are the newest, after the one in flight
        ++stats.dropped_at_exit;
      }
    }
    progress.notify_all();
    if (dropped.empty()) {
      return;  // only the item in flight is left: the destructor's join waits for it
    }
    const Result<PutOutcome> outcome =
        make_error(ErrorCode::timeout, options.what + ": dropped, not done within the exit time bound");
    for (const Item& item : dropped) {
      call_done(item.done, outcome);
    }
    warn(fmt::format("{}: {} still queued after {} ms at exit, dropped (the local cache keeps the entries; "
                     "`kcache push --all` uploads them)",
                     options.what, dropped.size(), timeout.count()));
  }

  Result<void> flush() {
    std::unique_lock lock(mutex);
    const std::uint64_t target = queued_seq;
    progress.wait(lock, [&] { return done_seq >= target; });
    if (unreported_failure) {
      Error e = std::move(*unreported_failure);
      unreported_failure.reset();
      return tl::unexpected(std::move(e));
    }
    return {};
  }

  std::unique_ptr<Store> inner;
  WriteBehindOptions options;

  mutable std::mutex mutex;
  std::condition_variable work;      // the thread waits here for items (or stop)
  std::condition_variable progress;  // producers wait for room, flushers for done items
  std::deque<Item> queue;            // waiting items; the one being written is not here
  std::unordered_map<Key, Pending, KeyHash> pending;  // every item not yet done, by key
  std::uint64_t pending_bytes = 0;
  std::uint64_t queued_seq = 0;  // items ever queued
  std::uint64_t done_seq = 0;    // items done (FIFO: the first done_seq of them)
  std::optional<Error> unreported_failure;
  bool warned = false;
  bool stop = false;
  WriteBehindStats stats;
  std::thread thread;
};

WriteBehindStore::WriteBehindStore(std::unique_ptr<Store> inner, WriteBehindOptions options)
    : m_impl(std::make_unique<Impl>(std::move(inner), std::move(options))) {}

WriteBehindStore::~WriteBehindStore() {
  if (m_impl->options.exit_flush_timeout.count() > 0) {
    m_impl->flush_within(m_impl->options.exit_flush_timeout);
  } else {
    (void)m_impl->flush();  // failures were warned about and counted
  }
  {
    std::lock_guard lock(m_impl->mutex);
    m_impl->stop = true;
  }
  m_impl->work.notify_all();
  if (m_impl->thread.joinable()) {
    m_impl->thread.join();
  }
}

Result<std::optional<Artifact>> WriteBehindStore::get(const Key& key) { return get_into(key, {}); }

std::shared_ptr<const Artifact> WriteBehindStore::queued(const Key& key) {
  std::shared_ptr<const Artifact> found;
  {
    std::lock_guard lock(m_impl->mutex);
    if (const auto it = m_impl->pending.find(key); it != m_impl->pending.end()) {
      found = it->second.artifact;
      ++m_impl->stats.pending_hits;
    }
  }
  if (found) {
    // Verified when it was queued and immutable since: served from this process's memory.
    note_served_tier(Tier::memory);
  }
  return found;
}

Result<std::optional<Artifact>> WriteBehindStore::get_into(const Key& key, const PayloadAllocator& allocate) {
  if (auto found = queued(key)) {
    return std::optional<Artifact>{*found};  // a copy for the caller
  }
  return m_impl->inner->get_into(key, allocate);
}

Result<std::shared_ptr<const Artifact>> WriteBehindStore::get_shared(const Key& key) {
  if (auto found = queued(key)) {
    return found;
  }
  return m_impl->inner->get_shared(key);
}

Result<PutOutcome> WriteBehindStore::put(const Artifact& artifact) { return put_then(artifact, {}); }

Result<PutOutcome> WriteBehindStore::put_then(const Artifact& artifact, PutDone done) {
  // Checked here, not only by the inner store: get() returns queued artifacts
  // to this process before the inner store has seen them.
  if (auto v = artifact.verify(); !v) {
    return m_impl->refuse(Error{ErrorCode::corrupt, "refusing to queue an artifact that does not verify: " +
                                                        v.error().message, {}},
                          done);
  }
  return m_impl->enqueue(artifact, PutKind::put, std::move(done));
}

Result<PutOutcome> WriteBehindStore::fill(const Artifact& artifact) {
  if (auto v = artifact.verify_shape(); !v) {
    return m_impl->refuse(Error{ErrorCode::corrupt, "refusing to queue an artifact that does not verify: " +
                                                        v.error().message, {}},
                          {});
  }
  return m_impl->enqueue(artifact, PutKind::fill, {});
}

Result<bool> WriteBehindStore::remove(const Key& key) {
  (void)m_impl->flush();  // a queued put must not bring the entry back after the remove
  return m_impl->inner->remove(key);
}

Result<std::vector<EntryInfo>> WriteBehindStore::list() {
  (void)m_impl->flush();
  return m_impl->inner->list();
}

Result<StoreStats> WriteBehindStore::stats() {
  (void)m_impl->flush();
  auto s = m_impl->inner->stats();
  if (s) {
    std::lock_guard lock(m_impl->mutex);
    // Failed background puts are already in the inner store's `errors`
    // (FileStore and TieredStore count their own failures).
    s->hits += m_impl->stats.pending_hits;
  }
  return s;
}

Result<void> WriteBehindStore::flush() { return m_impl->flush(); }

WriteBehindStats WriteBehindStore::write_behind_stats() const {
  std::lock_guard lock(m_impl->mutex);
  WriteBehindStats s = m_impl->stats;
  s.pending = m_impl->queued_seq - m_impl->done_seq;
  s.pending_bytes = m_impl->pending_bytes;
  return s;
}

Store& WriteBehindStore::inner() noexcept { return *m_impl->inner; }

std::optional<Tier> WriteBehindStore::tier_kind() const noexcept { return m_impl->inner->tier_kind(); }

RequestStats* WriteBehindStore::request_stats() noexcept { return m_impl->inner->request_stats(); }

}  // namespace kcache
