// kcache/cache.hpp: a store plus single-flight: get_or_compile().
//
// get_or_compile(request):
//   derive the key -> store get -> hit: return it (no toolkit load)
//   -> miss: take the key's single-flight lease (threads of this process and
//      processes on this machine) -> look again (the holder we waited for
//      published it: return it) -> with a remote lease (CacheOptions::
//      remote_lease), take it or wait for another host's published entry
//      -> compile -> put -> release -> return.
//
// The lease is released only once the entry is published (Store::put_then):
// with a WriteBehindStore the put returns at once and the lease is released
// by the store's background thread after the inner store has published, so
// get_or_compile returns before the publish but no other process ever finds
// the key unlocked while the entry is still queued.
//
// However many threads and processes ask for one cold key at once, one
// compiles and the others get its published result (TESTING C05). A holder
// that fails or dies releases the lease (the kernel drops a dead process's
// lock), so a waiter finds no entry and compiles itself rather than hang
// (C06). A wait is bounded by `lock_timeout`; when it runs out, or when the
// lock directory is unusable, the caller compiles without the lease (a broken
// cache never breaks a build; counted in `lock_timeouts` / `lock_errors`).
// A failed compile is returned and not cached, except a deterministic one that
// the compile step returns as its negative entry (compile_in_process): that is
// stored like any artifact, and every call (this one and later ones, in any
// process) returns the error it holds (a hit: counted as served, and apart
// as a served failure). A store that cannot be written
// is warned about once and counted; the compiled artifact is still returned.
// The store of a cache that is turned off (Store::disabled()) is not asked:
// get_or_compile(request) compiles as compile_without_cache() does (or with
// CacheOptions::compile), with no key derived, and says compiled_only.
//
// The compile duration is recorded in the passport (`compile_duration_us`,
// measured here when the compiler left it at 0), so a later hit can report the
// time it saved (`CacheStats::compile_us_saved`, and the store's
// StoreStats::compile_us_saved).
//
// Every call is one request, counted by how it ended (served from memory,
// disk, bundle or remote; compiled; uncached; failed) in the request counters
// of the store's cache directory under the call's route
// (kcache/request_stats.hpp; `kcache stats`).
//
// Thread-safety: every method is thread-safe. The store is borrowed and must
// outlive the Cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/remote_lease.hpp"
#include "kcache/request_stats.hpp"
#include "kcache/single_flight.hpp"
#include "kcache/store.hpp"

namespace kcache {

// What a compile function produced. `cacheable == false` (the inputs changed
// while compiling, or the request cannot be keyed) keeps it out of the store.
struct CompileOutput {
  Artifact artifact;
  bool cacheable = true;
};

// Compiles one request; called only on a miss, while holding the lease.
using CompileFunction = std::function<Result<CompileOutput>(const CompileRequest&)>;

// Compiles `request` in this process with compile_uncached() (compiler.hpp);
// `cacheable` is false when compile_uncached says the output must not be
// stored. A deterministic failure (CompileInfo::failed_entry) is returned as
// its negative entry (kind "failed-compile"), which get_or_compile stores and
// returns as the error it holds. The default CompileFunction, and what
// `kcache worker` runs.
Result<CompileOutput> compile_in_process(const CompileRequest& request);

struct CacheOptions {
  // Where per-key lock files live: `<cache_dir>/v1/locks`. Empty: the lease
  // excludes threads of this process only.
  std::filesystem::path lock_dir;
  unsigned lock_dir_mode = 0700;
  // The longest a caller waits for another holder before compiling itself.
  std::chrono::milliseconds lock_timeout = std::chrono::minutes(10);
  // How a miss is compiled. Empty: in this process with compile_uncached()
  // (kcache/compiler.hpp). The worker pool provides one (worker_pool.hpp).
  CompileFunction compile;
  // One-line warnings (a store that cannot be written). Default: stderr.
  std::function<void(const std::string&)> warn;
  // One compile per key across hosts (kcache/remote_lease.hpp): after taking
  // the local lease and missing again, the caller takes this lease or waits
  // for the owner's published entry. Released once the entry is published
  // in every tier of the store (Store::put_then). Null: no cross-host lease.
  // Shared: put callbacks that outlive the call keep it alive.
  std::shared_ptr<RemoteLease> remote_lease;
  // The route requests are counted under (kcache/request_stats.hpp). Empty:
  // the process's default route (default_request_route()).
  std::string route;
  // False: this Cache counts no request (its caller counts them itself, as
  // the `kcache run` stand-in does).
  bool count_requests = true;
};

// What happened to one get_or_compile call.
enum class CacheOutcome {
  hit,             // found in the store at the first look
  hit_after_wait,  // another thread or process compiled it while we waited
  compiled,        // compiled here and published (or queued to be, by a write-behind store)
  compiled_only,   // compiled here, not published (not cacheable, the store failed, or the cache is off)
};
std::string_view to_string(CacheOutcome outcome) noexcept;

// Counters of one Cache object (this process).
struct CacheStats {
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;              // both kinds of hit
  std::uint64_t hits_after_wait = 0;
  std::uint64_t compiles = 0;          // compile functions called
  std::uint64_t compile_failures = 0;
  std::uint64_t waits = 0;             // leases that had to wait for another holder
  std::uint64_t lock_timeouts = 0;
  std::uint64_t lock_errors = 0;
  std::uint64_t store_errors = 0;
  std::uint64_t not_cacheable = 0;
  std::uint64_t compile_us = 0;        // time spent compiling in this process
  std::uint64_t compile_us_saved = 0;  // sum of compile_duration_us over hits
  std::uint64_t remote_waits = 0;      // hits after waiting for another host's remote lease
  std::uint64_t remote_lease_timeouts = 0;  // remote lease waits that ran out (compiled here too)
};

class Cache {
 public:
  Cache(Store& store, CacheOptions options = {});
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // Returns the artifact of `request`: from the store, or compiled once per
  // key across threads and processes (see the top of this file).
  // Failure: the compile's error (compile_failed with the log, toolkit_missing,
  // worker_crashed, timeout ...) or derive_key's (invalid_argument). A request
  // that cannot be keyed (`unsupported` from derive_key) is compiled without
  // the cache. `outcome`, when given, says what happened.
  // `route`, when not empty, is the route this request is counted under
  // instead of CacheOptions::route.
  Result<Artifact> get_or_compile(const CompileRequest& request, CacheOutcome* outcome = nullptr,
                                  std::string_view route = {});
  // get_or_compile(), as one shared, immutable artifact: a hit from the
  // memory tier is the tier's own (Store::get_shared), with no copy of its
  // passport. For callers that keep the artifact shared anyway (the Python
  // binding's objects).
  Result<std::shared_ptr<const Artifact>> get_or_compile_shared(const CompileRequest& request,
                                                                CacheOutcome* outcome = nullptr,
                                                                std::string_view route = {});

  // The same protocol for any producer: `compile` is called at most once per
  // key across holders, only on a miss. The artifact it returns must carry
  // `key` in its passport (internal error otherwise; nothing is stored). An
  // error it returns is this call's error, and the lease is released (a
  // waiter compiles itself); with the code `unsupported` it says the producer
  // made its result without the cache (not cacheable), and the request counts
  // as uncached, not failed.
  Result<Artifact> get_or_compile(const Key& key, const std::function<Result<CompileOutput>()>& compile,
                                  CacheOutcome* outcome = nullptr, std::string_view route = {});
  // The same, shared (as get_or_compile_shared(request) above).
  Result<std::shared_ptr<const Artifact>> get_or_compile_shared(
      const Key& key, const std::function<Result<CompileOutput>()>& compile, CacheOutcome* outcome = nullptr,
      std::string_view route = {});

  // How the last get_or_compile() call of any Cache on this thread ended, as
  // it is counted (also when CacheOptions::count_requests is false): its
  // outcome, the tier that served it (served only), and its compile duration
  // (saved when served, spent otherwise). std::nullopt before any call.
  struct Counted {
    RequestOutcome outcome = RequestOutcome::failed;
    std::optional<Tier> tier;
    std::uint64_t compile_us = 0;
  };
  static std::optional<Counted> last_request() noexcept;

  CacheStats stats() const;
  Store& store() noexcept;
  SingleFlight& single_flight() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
