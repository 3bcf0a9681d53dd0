// kcache/write_behind_store.hpp: puts that return at once and publish behind.
//
// A WriteBehindStore wraps another store (usually the configured TieredStore
// of memory + FileStore). put() and fill() check the artifact, queue a copy
// and return `PutOutcome::queued`; one background thread performs the inner
// puts in the order they were queued. The inner store keeps every rule of its
// own (a FileStore stages in tmp/, fsyncs and publishes with one rename), so
// what the background thread publishes is exactly what a synchronous put
// would have published, only later.
//
//   put(a)  -> verify a -> wait while the queue is full -> queue -> `queued`
//   thread  -> inner.put(a) -> done(outcome) -> drop a from the queue
//   get(k)  -> a queued artifact for k (this process), else inner.get(k)
//
// Guarantees:
// - Read-your-writes in this process: get() of a queued key returns the queued
//   artifact (a copy) until the inner put has finished; then the inner store
//   answers. There is no moment where neither has it (unless the inner put
//   failed).
// - Other processes see an entry only when the inner store has published it.
//   put_then() calls its `done` callback after that moment, on the background
//   thread; Cache::get_or_compile hands its single-flight lease to that
//   callback, so a waiter in another process never finds the key unlocked
//   with the entry not yet on disk (docs/single-flight.md).
// - Memory is bounded: queued artifacts hold at most `max_pending_bytes`
//   (payload + compile log bytes). A put that would go over waits until the
//   background thread has made room (back-pressure; the wait is counted). One
//   artifact larger than the bound is queued alone, when the queue is empty.
// - A broken cache never breaks a build (DESIGN rule 3): a background put that
//   fails is counted (`WriteBehindStats::failed`), the first failure is
//   warned about once, and the queued artifact is dropped; the caller already
//   has its artifact. flush() reports the first failure since the last flush.
// - flush() waits until everything queued before it is done (published or
//   failed, `done` callbacks run). The destructor flushes, so a process that
//   returns from main (or destroys the store) has published its entries,
//   within `exit_flush_timeout` when one is set (then the rest is dropped and
//   counted, and one warning says so). A
//   process killed with puts queued leaves them simply missing: nothing is
//   staged until the background thread runs the inner put, and the inner
//   store's own commit point covers a kill during it.
// - remove(), list() and stats() flush first and then ask the inner store, so
//   they never disagree with what this process has put. To reach the inner
//   store directly (FileStore::clear, verify, prune), flush() first.
//
// The background thread starts with the first queued put (a process that only
// hits never starts it). Forking a process with a queued put: the child has no
// background thread and must not use the store.
//
// Thread-safety: every method is thread-safe. A `done` callback runs on the
// background thread (or on the caller's thread when the put is refused at
// once) and must not call back into this store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kcache/store.hpp"

namespace kcache {

struct WriteBehindOptions {
  // The most bytes (payload + compile log) the queue holds; a put that would
  // exceed it waits. Must be > 0.
  std::uint64_t max_pending_bytes = std::uint64_t{64} << 20;
  // Receives one line the first time a background put fails. Default: stderr
  // with a "kcache: warning: " prefix.
  std::function<void(const std::string&)> warn;
  // Whether a failed background put is warned about (false where the inner
  // store warns about its own failures, as RemoteStore does).
  bool warn_on_failure = true;
  // How long the destructor waits for the queue; 0 waits for every item. When
  // the time is up, the items still queued (not the one being written) are
  // dropped: their `done` callbacks get an error, one line is warned (through
  // `warn`, naming `what`), and the destructor waits only for the item in
  // flight. flush() itself always waits for everything.
  std::chrono::milliseconds exit_flush_timeout{0};
  // What the queued items are, for that warning ("uploads to redis://host:6379").
  std::string what = "background puts";
};

// Counters of one WriteBehindStore (this process).
struct WriteBehindStats {
  std::uint64_t queued = 0;             // puts accepted into the queue
  std::uint64_t published = 0;          // inner puts that succeeded (stored or already present)
  std::uint64_t failed = 0;             // inner puts that failed (dropped, warned once)
  std::uint64_t rejected = 0;           // puts refused at once (artifact does not verify)
  std::uint64_t pending_hits = 0;       // get()s answered from the queue
  std::uint64_t pending = 0;            // queued, not yet done
  std::uint64_t pending_bytes = 0;      // bytes held by those
  std::uint64_t peak_pending_bytes = 0;
  std::uint64_t backpressure_waits = 0;  // puts that waited for room
  std::uint64_t dropped_at_exit = 0;     // queued items dropped by the destructor's time bound
  std::uint64_t backpressure_us = 0;     // time callers spent waiting for room
  std::uint64_t background_put_us = 0;   // time the background thread spent in inner puts
};

class WriteBehindStore final : public Store {
 public:
  // Takes ownership of `inner` (not null).
  explicit WriteBehindStore(std::unique_ptr<Store> inner, WriteBehindOptions options = {});
  // Flushes (publishes everything queued), then stops the background thread.
  // Never throws; failures were already warned about and counted.
  ~WriteBehindStore() override;
  WriteBehindStore(const WriteBehindStore&) = delete;
  WriteBehindStore& operator=(const WriteBehindStore&) = delete;

  std::string_view name() const noexcept override { return "write-behind"; }
  // The inner store's.
  std::optional<Tier> tier_kind() const noexcept override;
  RequestStats* request_stats() noexcept override;

  // Hit: the queued artifact of `key` (a copy), else the inner store's hit.
  // Miss: std::nullopt. Error: the inner store's error.
  Result<std::optional<Artifact>> get(const Key& key) override;
  // get(), asking the inner store with get_into (see Store::get_into).
  Result<std::optional<Artifact>> get_into(const Key& key, const PayloadAllocator& allocate) override;
  // get(), shared: a queued artifact as it is queued, else the inner store's get_shared.
  Result<std::shared_ptr<const Artifact>> get_shared(const Key& key) override;
  // Verifies `artifact` against its passport (SHA-256), waits while the queue
  // is full, queues a copy and returns `queued`. Failure: `corrupt` when it
  // does not verify (nothing is queued). Store failures happen later, on the
  // background thread: counted and warned, never returned here.
  Result<PutOutcome> put(const Artifact& artifact) override;
  // As put(), with Store::fill's shape check instead of the SHA-256; the
  // inner store is filled with fill().
  Result<PutOutcome> fill(const Artifact& artifact) override;
  // As put(); `done` receives the inner put's outcome after the entry is
  // published (or the put failed), on the background thread. When the put is
  // refused at once, `done` is called with that error before this returns.
  Result<PutOutcome> put_then(const Artifact& artifact, PutDone done) override;
  // Flush, then the inner store's answer.
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  // Flush, then the inner store's counters; `hits` adds the get()s answered
  // from the queue.
  Result<StoreStats> stats() override;

  // Waits until every put queued before this call is done. Success: all of
  // them were published (or were already present). Failure: the error of the
  // first background put that failed since the previous flush() (the others
  // are counted in write_behind_stats().failed).
  Result<void> flush();

  WriteBehindStats write_behind_stats() const;

  // The wrapped store. Flush first when using it directly.
  Store& inner() noexcept;

 private:
  // The queued artifact of `key` (counted, noted as served from memory); null when none is queued.
  std::shared_ptr<const Artifact> queued(const Key& key);
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
