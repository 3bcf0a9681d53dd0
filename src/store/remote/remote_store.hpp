// store/remote/remote_store.hpp: a remote server as a Store tier.
//
// RemoteStore puts a RemoteBackend (Redis, ...) behind the Store interface:
// get() fetches the object `kcache:v1:<key>` and decodes and verifies it in
// full (remote_codec.hpp: size, format, signature, payload SHA-256, key
// recomputed from the key record) before anything else sees it; put()
// encodes (zstd, signed with the team key) and writes with one SET NX.
// Objects of stream_min_bytes (8 MiB) or more move in parts where the
// backend streams (HTTP, S3): downloads are checked as they arrive into a
// payload staged in the local FileStore (options.local, fetch_into) and
// published by its commit; uploads are encoded as they are sent
// (object_stream.hpp). Memory then does not grow with the entry.
//
// Degrade, never break (DESIGN rule 3):
// - A failed operation (server down, slow, full, refusing) is counted and
//   warned about once per process; get() then answers a miss, so the caller
//   compiles. put() returns the error (WriteBehindStore counts it).
// - After `breaker_failures` consecutive failures, or one that waited out its
//   timeout (a hung server), the remote is skipped for `breaker_seconds`
//   (circuit breaker): get() is a miss and put() fails at once, without
//   touching the network. After that time one operation (in one process: the
//   half-open probe) is let through; a success closes the breaker. With a
//   `stats_dir`, the breaker is shared by every process of the cache
//   directory (remote_breaker.hpp), so the next process skips a dead remote
//   at once.
// - With a `budget`, a failed or slow operation spends its time from the
//   process's remote budget (remote_budget.hpp); once spent, every operation
//   is skipped, with one warning.
// - A bad object (any Rejection) is a miss, counted per reason, warned about
//   once, and its key is not fetched again by this process.
//
// list() is empty (a remote is not enumerated); stats() reports counters of
// this process only (entries/size are 0: the server owns its eviction).
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "kcache/file_store.hpp"
#include "kcache/store.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/remote_breaker.hpp"
#include "store/remote/remote_budget.hpp"
#include "store/remote/remote_codec.hpp"
#include "store/remote/remote_spec.hpp"

namespace kcache::remote {

struct RemoteStoreOptions {
  RemoteSpec spec;
  // Compression and team keys; max_entry_size is taken from `spec`.
  CodecOptions codec;
  std::uint32_t breaker_failures = 3;  // consecutive failures that open the breaker (0: never)
  std::uint32_t breaker_seconds = 30;  // how long an open breaker skips the remote
  // When not empty: keep the breaker and this remote's counters in
  // <stats_dir>/remote-<id> (remote_breaker.hpp), shared by every process of
  // the cache directory, for `kcache stats`.
  std::filesystem::path stats_dir;
  bool stats_group_shared = false;
  // The process's remote budget (RemoteBudget::for_process); null: none.
  std::shared_ptr<RemoteBudget> budget;
  // Whether this store warns about the remote's failures and its open
  // breaker (false for the store a RedisLease uses: the data tier of the same
  // remote says it once). The line that the process's budget is spent is
  // said by whichever store spends the last of it.
  bool warn_failures = true;
  // Receives the one warning line of this remote. Default: stderr with a
  // "kcache: warning: " prefix.
  std::function<void(const std::string&)> warn;
  // Where get() puts an object of `stream_min_bytes` or more when the backend
  // streams (HTTP, S3): checked as it arrives (object_stream.hpp), staged in
  // this store's v1/tmp and published there by its atomic commit, then read
  // back from it, so memory does not grow with the entry. Null: get() holds
  // every object in memory (bounded by max_entry_size).
  // REQUIRES: the store outlives this RemoteStore.
  FileStore* local = nullptr;
  // Objects (and uploads of entries) at least this large move in parts when
  // the backend streams; smaller ones take the in-memory path (one buffer,
  // decoded at once: the fastest hit).
  std::uint64_t stream_min_bytes = std::uint64_t{8} << 20;
};

// What fetch_into() did.
enum class Fetched {
  miss,             // not on the remote (or refused, failed, skipped: counted as get() counts them)
  stored,           // published in the local store
  already_present,  // the local store had it already
};

// Counters of one RemoteStore in this process.
struct RemoteStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t errors = 0;           // failed operations (connect, timeout, refused)
  std::uint64_t skipped = 0;          // operations skipped by the open breaker or the spent budget
  std::uint64_t breaker_opened = 0;   // times the breaker opened
  std::uint64_t puts = 0;             // objects written
  std::uint64_t puts_present = 0;     // puts that found the object already there
  std::uint64_t puts_too_large = 0;   // entries not uploaded: over max_entry_size (warned once per process)
  std::uint64_t rejected = 0;         // bad objects (sum of rejected_by)
  std::array<std::uint64_t, 7> rejected_by{};  // indexed by Rejection
  std::uint64_t bytes_in = 0;         // object bytes downloaded (accepted or not)
  std::uint64_t bytes_out = 0;        // object bytes uploaded
  std::uint64_t compile_us_saved = 0; // compile_duration_us of the hits
  std::uint64_t get_p50_us = 0;       // latency of get() round trips (last 4096)
  std::uint64_t get_p99_us = 0;
};

class RemoteStore final : public Store {
 public:
  // Builds the store and its backend (no network traffic until the first
  // call). Failure: unsupported scheme.
  static Result<std::unique_ptr<RemoteStore>> open(RemoteStoreOptions options);
  // Builds the store over a given backend (tests, `kcache remote ping`).
  RemoteStore(RemoteStoreOptions options, std::unique_ptr<RemoteBackend> backend);
  ~RemoteStore() override;
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  std::string_view name() const noexcept override { return "remote"; }
  std::optional<Tier> tier_kind() const noexcept override { return Tier::remote; }
  bool writable() const noexcept override;

  // Hit: a verified artifact. Miss: std::nullopt (also for a bad object, a
  // failure, or an open breaker: all counted). Never an Error.
  Result<std::optional<Artifact>> get(const Key& key) override;
  // Verifies, encodes, uploads. `stored` or `already_present`. Failure:
  // `corrupt` when the artifact does not verify, read_only for a read-only
  // remote, else the backend's error (counted, warned once).
  Result<PutOutcome> put(const Artifact& artifact) override;
  // As put() without re-hashing (the artifact was verified moments ago).
  Result<PutOutcome> fill(const Artifact& artifact) override;
  Result<bool> remove(const Key& key) override;
  Result<std::vector<EntryInfo>> list() override;
  Result<StoreStats> stats() override;

  // Fetches the object of `key` into `local` (`kcache pull`), verified in
  // full as get() verifies it: a small object is decoded in memory and
  // filled into `local`; one of stream_min_bytes or more, on a streaming
  // backend, is checked as it arrives, staged in `local`'s v1/tmp and
  // published by its atomic commit (a refused or cut object leaves nothing).
  // Failure: only the local store's write error.
  Result<Fetched> fetch_into(const Key& key, FileStore& local);
  // Uploads the verified local entry `file` (FileStore::open_payload) as
  // fill() uploads an artifact; a payload of stream_min_bytes or more is read
  // from its file in parts as it is sent (streaming backends: memory does not
  // grow with it). Failure: as put(), or the read error of the payload file.
  Result<PutOutcome> put_file(const PayloadFile& file);

  // Cross-host leases (RedisLease; docs/single-flight.md), through the same
  // circuit breaker as every other operation: while it is open each call
  // fails at once with `busy`. `unsupported` for a backend without leases
  // (HTTP), read_only for a read_only remote (a reader never publishes, so it
  // takes no lease). Otherwise as RemoteBackend's lease calls, for the lease
  // named lease_name(key).
  bool supports_leases() const noexcept;
  Result<bool> lease_take(const Key& key, std::string_view token, std::uint64_t ttl_ms);
  Result<bool> lease_renew(const Key& key, std::string_view token, std::uint64_t ttl_ms);
  Result<bool> lease_release(const Key& key, std::string_view token);
  // Who holds the lease of `key` now (value, PTTL); std::nullopt: nobody.
  Result<std::optional<LeaseInfo>> lease_inspect(const Key& key);
  // RemoteBackend::lease_take_foreign for the lease of `key`.
  Result<bool> lease_take_foreign(const Key& key, std::string_view seen, std::string_view token, std::uint64_t ttl_ms);
  // True when the object of `key` exists on the server (not fetched, not verified).
  Result<bool> exists(const Key& key);

  RemoteStats remote_stats() const;
  // The breaker (shared with the other processes of the cache directory when
  // it has a file) and the per-remote counters it holds.
  RemoteBreaker& breaker() const noexcept;
  const RemoteSpec& spec() const noexcept;
  // One round trip asking the server who it is (not subject to the breaker).
  Result<std::string> describe();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache::remote
