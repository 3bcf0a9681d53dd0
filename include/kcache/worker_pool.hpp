// kcache/worker_pool.hpp: compiles in worker processes.
//
// A WorkerPool runs compile requests in N worker processes (`kcache worker`,
// started with posix_spawn), speaking the versioned, length-prefixed protocol
// of docs/worker-protocol.md over one socket pair per worker. Workers are
// started on first use and reused; each runs one request at a time.
//
// Isolation (TESTING W01): a worker that crashes, aborts, exits, runs out of
// memory or writes a garbage or truncated frame fails only the request it was
// running (worker_crashed, with the signal or reason and the program name);
// one that does not answer within `request_timeout` is killed (timeout).
// Either way the worker is reaped (no zombies), its descriptors are closed (no
// leaks), and a fresh worker is started for the next request. Nothing from a
// failed request is cached.
//
// Thread-safety: every method is thread-safe; compile() may be called from
// many threads at once (each waits for a free worker).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kcache/artifact.hpp"
#include "kcache/cache.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache {

struct WorkerPoolOptions {
  // The worker program and its arguments. Empty `executable`: the result of
  // default_worker_executable().
  std::filesystem::path executable;
  std::vector<std::string> arguments = {"worker"};
  // Number of worker processes; 0 = the number of cores.
  unsigned workers = 0;
  // Longest time one request may take (send, compile, reply) before its
  // worker is killed.
  std::chrono::milliseconds request_timeout = std::chrono::minutes(10);
  // Longest time a new worker may take to say hello.
  std::chrono::milliseconds start_timeout = std::chrono::seconds(30);
  // Extra environment entries ("NAME=value") for workers, over this process's.
  std::vector<std::string> environment;
};

struct WorkerPoolStats {
  std::uint64_t requests = 0;      // requests sent to workers
  std::uint64_t spawned = 0;       // worker processes started
  std::uint64_t crashed = 0;       // workers that died or spoke garbage mid-request
  std::uint64_t timed_out = 0;     // workers killed for taking too long
  std::uint64_t deduplicated = 0;  // requests in compile_many batches served by an identical one
};

// Progress of compile_many: called once per distinct request as it finishes
// (from worker-facing threads, serialised by the pool).
using CompileProgress = std::function<void(std::size_t done, std::size_t total, const CompileRequest& request,
                                           const Result<Artifact>& result)>;

// The worker executable to use by default: $KCACHE_WORKER_EXECUTABLE if set;
// else this program when it is named `kcache`; else `kcache` beside this
// program; else `kcache` on PATH. Returns not_found when none exists.
Result<std::filesystem::path> default_worker_executable();

class WorkerPool {
 public:
  // Creates a pool (workers start on first use). Returns not_found when no
  // worker executable can be found, invalid_argument for a bad option.
  static Result<std::unique_ptr<WorkerPool>> create(WorkerPoolOptions options = {});

  // Asks every idle worker to exit, waits briefly, kills what remains, and
  // reaps every worker process. Never throws.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Compiles one request in a worker (blocking until a worker is free).
  // Success: the artifact and whether it may be cached. Failure: the
  // compile's own error (compile_failed with the log, toolkit_missing ...),
  // worker_crashed (died, garbage, truncated frame, could not start), or
  // timeout (killed after request_timeout).
  Result<CompileOutput> compile(const CompileRequest& request);

  // Compiles `requests` in parallel on the pool and returns one result per
  // request, in order. Requests with the same key (or, when a request cannot
  // be keyed, identical requests) are compiled once and share the result.
  // With `cache`, each distinct request goes through cache->get_or_compile
  // (lookup, single-flight, publish) with the pool as the compiler. Without
  // one (or with a cache that is turned off, Store::disabled()) no key is
  // derived: identical requests are compiled once.
  std::vector<Result<Artifact>> compile_many(const std::vector<CompileRequest>& requests,
                                             Cache* cache = nullptr, const CompileProgress& progress = {});

  // A CompileFunction that runs on this pool (for CacheOptions::compile).
  // The pool must outlive every use of it.
  CompileFunction compile_function();

  // Number of worker slots, and the pids of the workers running now.
  unsigned size() const noexcept;
  std::vector<pid_t> worker_pids() const;
  WorkerPoolStats stats() const;

 private:
  struct Impl;
  explicit WorkerPool(std::unique_ptr<Impl> impl);
  void note_deduplicated() noexcept;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
