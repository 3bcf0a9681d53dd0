// get_or_compile: lookup, single-flight lease, look again, compile, publish.
#include "kcache/cache.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>

#include "kcache/compiler.hpp"
#include "kcache/request_stats.hpp"
#include "passport/failed_compile.hpp"

namespace kcache {

std::string_view to_string(CacheOutcome outcome) noexcept {
  switch (outcome) {
    case CacheOutcome::hit: return "hit";
    case CacheOutcome::hit_after_wait: return "hit_after_wait";
    case CacheOutcome::compiled: return "compiled";
    case CacheOutcome::compiled_only: return "compiled_only";
  }
  return "unknown";
}

namespace {

using Shared = std::shared_ptr<const Artifact>;

// `r`'s artifact, shared (made non-const, as Store::get_shared's are).
Result<Shared> share(Result<Artifact> r) {
  if (!r) {
    return tl::unexpected(std::move(r.error()));
  }
  return Shared(std::make_shared<Artifact>(std::move(*r)));
}

// The artifact of `r` for a caller who wants one of its own: moved out when
// the caller is its last owner (no other pointer to it exists, so none can
// appear: the object was made non-const), else copied (a memory tier's).
Result<Artifact> unshare(Result<Shared> r) {
  if (!r) {
    return tl::unexpected(std::move(r.error()));
  }
  if (r->use_count() == 1) {
    return std::move(const_cast<Artifact&>(**r));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  return Artifact(**r);
}

// The tier of the hit the last look() on this thread found, the hit that
// call served (its tier and saved time), and how the last get_or_compile()
// on this thread ended (Cache::last_request).
thread_local Tier t_look_tier = Tier::disk;
thread_local std::optional<std::pair<Tier, std::uint64_t>> t_served;
thread_local std::optional<Cache::Counted> t_last_request;

// The leases one call holds until its entry is published: the local
// single-flight lease and, on a Redis team remote, the cross-host lease.
// Released together, at the latest when the last owner drops it.
struct Holds {
  Key key;
  std::optional<Lease> local;
  std::shared_ptr<RemoteLease> remote;  // set while this process owns the remote lease of `key`

  void release() noexcept {
    if (remote) {
      remote->release(key);
      remote.reset();
    }
    if (local) {
      local->release();
      local.reset();
    }
  }
  Holds() = default;
  Holds(const Holds&) = delete;
  Holds& operator=(const Holds&) = delete;
  ~Holds() { release(); }
};

}  // namespace

struct Cache::Impl {
  Store& store;
  CacheOptions options;
  SingleFlight flight;
  std::once_flag warned;

  struct Counters {
    std::atomic<std::uint64_t> lookups{0}, hits{0}, hits_after_wait{0}, compiles{0},
        compile_failures{0}, waits{0}, lock_timeouts{0}, lock_errors{0}, store_errors{0},
        not_cacheable{0}, compile_us{0}, compile_us_saved{0}, remote_waits{0}, remote_lease_timeouts{0};
  } c;

  Impl(Store& s, CacheOptions o)
      : store(s), options(std::move(o)), flight(options.lock_dir, options.lock_dir_mode) {}

  void warn(const std::string& line) {
    if (options.warn) {
      options.warn(line);
    } else {
      std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    }
  }

  // A store hit, or null. A store that cannot be read is a miss (counted).
  // Shared: a hit from the memory tier is the tier's own artifact, uncopied.
  Shared look(const Key& key) {
    Store::note_served_tier(std::nullopt);
    auto got = store.get_shared(key);
    if (!got) {
      c.store_errors++;
      return nullptr;
    }
    if (!*got || (*got)->passport.key != key) {
      return nullptr;
    }
    if (is_failed_compile((*got)->passport) && !failed_compile_error(**got)) {
      return nullptr;  // a negative entry that does not decode answers nothing: a miss
    }
    t_look_tier = served_tier(store);
    return std::move(*got);
  }

  Result<Shared> hit(Shared a, CacheOutcome kind, CacheOutcome* outcome) {
    t_served.emplace(t_look_tier, a->passport.compile_duration_us);
    c.hits++;
    if (kind == CacheOutcome::hit_after_wait) {
      c.hits_after_wait++;
    }
    c.compile_us_saved += a->passport.compile_duration_us;
    if (outcome != nullptr) {
      *outcome = kind;
    }
    return a;
  }

  // run_once(), counted as one request under `route` (empty: options.route,
  // then the process's default) once it has ended.
  Result<Shared> run(const Key& key, const std::function<Result<CompileOutput>()>& compile,
                     CacheOutcome* outcome, std::string_view route) {
    t_served.reset();
    CacheOutcome kind = CacheOutcome::compiled;
    std::uint64_t compile_us = 0;
    // A producer that answers `unsupported` compiled without the cache (get_or_compile in cache.hpp).
    bool compiled_elsewhere = false;
    auto result = run_once(
        key,
        [&]() -> Result<CompileOutput> {
          auto out = compile();
          compiled_elsewhere = !out && out.error().code == ErrorCode::unsupported;
          return out;
        },
        &kind, compile_us);
    // A negative entry (found, or just compiled and stored) is the failure it
    // holds (passport/failed_compile.hpp); one that could not be stored is a
    // failed request.
    const bool failed = result && is_failed_compile((*result)->passport);
    if (failed) {
      result = share(served_or_failed(Artifact(**result)));
    }
    const bool hit = kind == CacheOutcome::hit || kind == CacheOutcome::hit_after_wait;
    if (failed && !hit) {
      c.compile_failures++;
    }
    if (outcome != nullptr && result) {
      *outcome = kind;
    }
    count(result || (failed && kind != CacheOutcome::compiled_only) ? std::optional<CacheOutcome>(kind)
          : compiled_elsewhere                                      ? std::optional<CacheOutcome>(CacheOutcome::compiled_only)
                                                                    : std::nullopt,
          compile_us, route, failed && hit);
    return result;
  }

  // Counts one request that ended with `kind` (std::nullopt: an error);
  // `served_failure`: the hit was a negative entry.
  void count(std::optional<CacheOutcome> kind, std::uint64_t compile_us, std::string_view route,
             bool served_failure = false) {
    Counted counted;
    counted.compile_us = compile_us;
    if (!kind) {
      counted.outcome = RequestOutcome::failed;
    } else if (*kind == CacheOutcome::hit || *kind == CacheOutcome::hit_after_wait) {
      const auto served = t_served.value_or(std::pair{Tier::disk, std::uint64_t{0}});
      counted.outcome = served_failure ? RequestOutcome::served_failure : RequestOutcome::served;
      counted.tier = served.first;
      counted.compile_us = served.second;
    } else {
      counted.outcome = *kind == CacheOutcome::compiled ? RequestOutcome::compiled : RequestOutcome::uncached;
    }
    t_last_request = counted;
    if (options.count_requests) {
      record_request(&store, !route.empty() ? route : std::string_view(options.route), counted.outcome, counted.tier,
                     counted.compile_us);
    }
  }

  Result<Shared> run_once(const Key& key, const std::function<Result<CompileOutput>()>& compile,
                          CacheOutcome* outcome, std::uint64_t& compiled_us) {
    c.lookups++;
    if (auto a = look(key)) {
      return hit(std::move(a), CacheOutcome::hit, outcome);
    }
    // While another process holds the key, peek at the store between polls:
    // its published entry ends the wait without queueing for the lock.
    Shared published;
    auto lease = flight.acquire(key, options.lock_timeout, [&] {
      published = look(key);
      return published != nullptr;
    });
    if (lease && !lease->held() && published) {
      c.waits++;
      return hit(std::move(published), CacheOutcome::hit_after_wait, outcome);
    }
    if (!lease) {
      // Never let a lock problem break the compile: go on without the lease.
      // A cache this process may not write (read-only, another owner's
      // modes) is no news worth a warning here: the put of what it compiles
      // says so once, and a compile with nothing to store (it failed) is
      // the real library's business alone.
      const ErrorCode why = lease.error().code;
      (why == ErrorCode::timeout ? c.lock_timeouts : c.lock_errors)++;
      if (why != ErrorCode::read_only && why != ErrorCode::permission_denied) {
        warn("single-flight lock for key " + key.hex() + " not taken (" + lease.error().describe() +
             "); compiling without it");
      }
    } else if (lease->waited()) {
      c.waits++;
    }
    const bool waited = lease && lease->waited();
    // What this call holds until the entry is published (or the compile fails).
    auto holds = std::make_shared<Holds>();
    holds->key = key;
    if (lease && lease->held()) {
      holds->local = std::move(*lease);
    }
    // Look again: a holder may have published between the first look and the lease.
    if (auto a = look(key)) {
      return hit(std::move(a), waited ? CacheOutcome::hit_after_wait : CacheOutcome::hit, outcome);
    }
    // One compile per key across hosts: only this host's leader of the key
    // gets here, and it takes (or waits for) the remote lease.
    if (options.remote_lease) {
      Shared from_host;
      const RemoteLeaseOutcome r = options.remote_lease->acquire(key, [&] {
        from_host = look(key);
        return from_host != nullptr;
      });
      if (r == RemoteLeaseOutcome::published && from_host) {
        c.remote_waits++;
        return hit(std::move(from_host), CacheOutcome::hit_after_wait, outcome);
      }
      if (r == RemoteLeaseOutcome::owner) {
        holds->remote = options.remote_lease;
      } else if (r == RemoteLeaseOutcome::timed_out) {
        c.remote_lease_timeouts++;
        warn("another host kept compiling key " + key.hex() +
             " for the whole remote_lease_wait_ms; compiling it here too");
      }
    }
    c.compiles++;
    const auto t0 = std::chrono::steady_clock::now();
    auto out = compile();
    const auto us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    c.compile_us += us;
    compiled_us = us;
    if (!out) {
      c.compile_failures++;
      return tl::unexpected(out.error());  // the lease is released: a waiter compiles itself
    }
    Artifact& a = out->artifact;
    if (a.passport.key != key) {
      c.compile_failures++;
      return make_error(ErrorCode::internal, "compiler returned an artifact for key " +
                                                 a.passport.key.hex() + " when asked for " + key.hex());
    }
    if (a.passport.compile_duration_us == 0) {
      a.passport.compile_duration_us = us;
    }
    CacheOutcome kind = CacheOutcome::compiled;
    if (!out->cacheable) {
      c.not_cacheable++;
      kind = CacheOutcome::compiled_only;
    } else {
      // The leases go with the put and are released once the entry is
      // published where other processes look (the remote lease: once the
      // remote tier has it): a write-behind store publishes after we return,
      // and a waiter must never find the key unlocked while the entry is
      // still queued. (The callback shares `holds`; the store's thread may be
      // its last owner.)
      PutDone release = [holds](const Result<PutOutcome>&) { holds->release(); };
      if (auto put = store.put_then(a, std::move(release)); !put) {
        c.store_errors++;
        kind = CacheOutcome::compiled_only;
        std::call_once(warned, [&] {
          warn("could not publish to the " + std::string(store.name()) +
               " store: " + put.error().describe() + " (compiles go on; further failures are counted)");
        });
      }
    }
    if (outcome != nullptr) {
      *outcome = kind;
    }
    return Shared(std::make_shared<Artifact>(std::move(a)));
  }
};

Result<CompileOutput> compile_in_process(const CompileRequest& request) {
  CompileInfo info;
  auto a = compile_uncached(request, &info);
  if (!a && info.failed_entry) {
    return CompileOutput{std::move(*info.failed_entry), true};  // stored; Cache::get_or_compile returns the error
  }
  if (!a) {
    return tl::unexpected(a.error());
  }
  return CompileOutput{std::move(*a), info.cacheable};
}

Result<Artifact> Cache::get_or_compile(const CompileRequest& request, CacheOutcome* outcome,
                                       std::string_view route) {
  return unshare(get_or_compile_shared(request, outcome, route));
}

Result<std::shared_ptr<const Artifact>> Cache::get_or_compile_shared(const CompileRequest& request,
                                                                     CacheOutcome* outcome, std::string_view route) {
  const CompileFunction& fn = m_impl->options.compile;
  const bool off = m_impl->store.disabled();
  auto compile_it = [&]() -> Result<CompileOutput> {
    if (fn) {
      return fn(request);
    }
    if (!off) {
      return compile_in_process(request);
    }
    auto a = compile_without_cache(request);
    if (!a) {
      return tl::unexpected(a.error());
    }
    return CompileOutput{std::move(*a), false};
  };
  // The cache is off: the user's compile, with no key derived (nothing would
  // be looked up or kept under it). Not cacheable: compile, never store. Both
  // count as one request, uncached (or failed).
  auto compile_only = [&]() -> Result<Artifact> {
    m_impl->c.compiles++;
    const auto t0 = std::chrono::steady_clock::now();
    auto out = compile_it();
    const auto us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    if (!out) {
      m_impl->c.compile_failures++;
      m_impl->count(std::nullopt, us, route);
      return tl::unexpected(out.error());
    }
    if (is_failed_compile(out->artifact.passport)) {
      // A producer's negative entry, where nothing is stored: its error.
      m_impl->c.compile_failures++;
      m_impl->count(std::nullopt, us, route);
      return served_or_failed(std::move(out->artifact));
    }
    m_impl->count(CacheOutcome::compiled_only, us, route);
    if (outcome != nullptr) {
      *outcome = CacheOutcome::compiled_only;
    }
    return std::move(out->artifact);
  };
  if (off) {
    return share(compile_only());
  }
  auto key = derive_request_key(request);
  if (!key) {
    if (key.error().code != ErrorCode::unsupported) {
      m_impl->count(std::nullopt, 0, route);
      return tl::unexpected(key.error());
    }
    // Not cacheable (an include kcache cannot resolve ...): compile, never store.
    m_impl->c.not_cacheable++;
    return share(compile_only());
  }
  return m_impl->run(*key, compile_it, outcome, route);
}

Cache::Cache(Store& store, CacheOptions options)
    : m_impl(std::make_unique<Impl>(store, std::move(options))) {}

Cache::~Cache() = default;

Result<Artifact> Cache::get_or_compile(const Key& key,
                                       const std::function<Result<CompileOutput>()>& compile,
                                       CacheOutcome* outcome, std::string_view route) {
  return unshare(m_impl->run(key, compile, outcome, route));
}

Result<std::shared_ptr<const Artifact>> Cache::get_or_compile_shared(
    const Key& key, const std::function<Result<CompileOutput>()>& compile, CacheOutcome* outcome,
    std::string_view route) {
  return m_impl->run(key, compile, outcome, route);
}

std::optional<Cache::Counted> Cache::last_request() noexcept { return t_last_request; }

CacheStats Cache::stats() const {
  const auto& c = m_impl->c;
  CacheStats s;
  s.lookups = c.lookups;
  s.hits = c.hits;
  s.hits_after_wait = c.hits_after_wait;
  s.compiles = c.compiles;
  s.compile_failures = c.compile_failures;
  s.waits = c.waits;
  s.lock_timeouts = c.lock_timeouts;
  s.lock_errors = c.lock_errors;
  s.store_errors = c.store_errors;
  s.not_cacheable = c.not_cacheable;
  s.compile_us = c.compile_us;
  s.compile_us_saved = c.compile_us_saved;
  s.remote_waits = c.remote_waits;
  s.remote_lease_timeouts = c.remote_lease_timeouts;
  return s;
}

Store& Cache::store() noexcept { return m_impl->store; }
SingleFlight& Cache::single_flight() noexcept { return m_impl->flight; }

}  // namespace kcache
