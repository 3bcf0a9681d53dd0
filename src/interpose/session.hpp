// interpose/session.hpp: kcache inside a program that runs under `kcache run`.
//
// One Session per process, made at the first interposed compile: the settings
// (as `kcache compile` reads them: environment, config file), the configured
// stores (memory, disk, remote), the single-flight Cache with its lock
// directory and cross-host lease, and the per-library counters
// (cache/interposed_counters.hpp), and the request counters of the route
// "run" (kcache/request_stats.hpp). When the cache is disabled (KCACHE_DISABLE),
// or cannot be used (a bad setting, a cache directory that cannot be opened),
// there is no session: get() returns nullptr and every call goes to the real
// library (with one warning when something was wrong).
//
// At exit the session publishes what is still queued (background puts,
// remote uploads, bounded by remote_flush_timeout_ms). After fork() the child
// starts without a session and makes its own at its first compile (the
// parent's background threads do not exist in the child).
//
// KCACHE_INTERPOSE_LOG=FILE appends one line per interposed call to FILE:
//   <pid> <library> <event> <key or ->            event: hit compile uncached fallback
// which is how the tests count real compiles (docs/run.md, "Counting").
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cache/interposed_counters.hpp"
#include "interpose/real_library.hpp"
#include "kcache/cache.hpp"

namespace kcache::interpose {

class Session {
 public:
  // The process's session, made on first use; nullptr when there is none
  // (see above). Never throws.
  static Session* get() noexcept;

  Cache& cache() noexcept { return *m_cache; }

  // Whether a recorded call replayed a failed compile (a negative entry).
  enum class Failure : bool { no, yes };

  // Counts `event` for `jit` (the library's counters, and one request of the
  // route "run" in the cache directory's request counters and the `kcache
  // run` report: kcache/request_stats.hpp) and logs it (KCACHE_INTERPOSE_LOG).
  // `failure` yes: a hit that replayed a failed compile (counted served, and
  // as a served failure), or a compile that failed and was stored.
  void record(Jit jit, InterposedEvent event, std::string_view key_hex, Failure failure = Failure::no) noexcept;

  // Prints "kcache: warning: <line>" once per process for `jit`; later ones are dropped.
  static void warn_once(Jit jit, const std::string& line) noexcept;

  // Logs `event` where there is no session (counted only in the `kcache run`
  // report, as a request of the route "run").
  static void log_event(Jit jit, InterposedEvent event, std::string_view key_hex) noexcept;

  // Holds the session open while a call uses it: the exit handler waits for
  // calls in flight before it tears the stores down.
  class Use {
   public:
    Use();
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    // nullptr when there is no session or the process is exiting.
    Session* session() const noexcept { return m_session; }

   private:
    Session* m_session = nullptr;
    bool m_locked = false;
  };

  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  Session() = default;
  std::unique_ptr<Store> m_store;
  std::unique_ptr<Cache> m_cache;
  std::unique_ptr<InterposedCounters> m_counters;

  friend struct SessionFactory;
};

}  // namespace kcache::interpose
