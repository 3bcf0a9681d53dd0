#include "kcache/compiler.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "compile/backends.hpp"
#include "compile/elf_file.hpp"
#include "compile/name_evidence.hpp"
#include "compile/request_keys.hpp"
#include "deps/base_dir.hpp"
#include "deps/dependencies.hpp"
#include "deps/derivation_memo.hpp"
#include "deps/header_manifest.hpp"
#include "kcache/compile_options.hpp"
#include "kcache/request_stats.hpp"
#include "kcache/toolkit.hpp"
#include "passport/failed_compile.hpp"
#include "util/clock.hpp"
#include "util/hex.hpp"
#include "util/random_bytes.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace {

using util::Clock;
using util::micros_since;

// Everything derive() learns about a request (deps/derivation.hpp).
using Derived = jit::Derivation;
using jit::Checks;
using jit::derive;

// A derivation, shared, and whether its disk identities were checked for this
// use (false: jit::derivation_still_holds() must pass before its key is trusted).
struct SharedDerived {
  std::shared_ptr<const Derived> d;
  bool checked = true;
  const Derived* operator->() const { return d.get(); }
  const Derived& operator*() const { return *d; }
};

// derive(), with the key computed, served from the process's memo
// (deps/derivation_memo.hpp) while nothing it depended on changed. Shared:
// the memo and every caller that got the same derivation hold it. With
// Checks::deferred a remembered derivation, or a family member's result, comes
// back unchecked (SharedDerived::checked false).
Result<SharedDerived> derive_shared(const CompileRequest& r, Checks checks = Checks::now) {
  const std::uint64_t generation = Toolkit::instance().generation();
  auto& memo = jit::DerivationMemo::instance();
  const bool remembered = r.backend == "nvrtc";
  if (remembered) {
    // An evidence key is derived again once another process (a worker) or
    // the interposer found that the directory matters (compile/name_evidence.hpp).
    if (auto d = memo.find(r, generation, checks == Checks::now);
        d && d->base_dir_setting == jit::base_dir_setting() &&
        (!d->name_full_key || !jit::name_directory_matters_remembered(d->key_value.hex(), d->memo_dir))) {
      return SharedDerived{std::move(d), checks == Checks::now};
    }
  }
  auto d = derive(r, checks);
  if (!d) {
    return tl::unexpected(d.error());
  }
  d->key_value = d->key.key();
  auto shared = std::make_shared<const Derived>(std::move(*d));
  if (remembered) {
    memo.remember(r, generation, shared);
  }
  const bool checked = shared->checked;
  return SharedDerived{std::move(shared), checked};
}

// Why an artifact compiled without a cache has no key of its own.
constexpr std::string_view k_compiled_without_cache = "compiled without a cache";

// A key no other request can have, for an artifact compiled outside the cache.
void make_unique_key(Derived& d) {
  // From getrandom(2), not std::random_device: GCC 12's static libstdc++
  // implements that with arc4random, which ties the kcache command to glibc
  // 2.36 (docs/install.md). Should the kernel refuse, the time and the pid
  // still make the key unique.
  std::array<std::uint8_t, 16> r{};
  const std::string nonce = util::random_bytes(r.data(), r.size(), "a key nonce")
                                ? util::to_hex(r.data(), r.size())
                                : std::to_string(util::realtime_ns()) + ":" + std::to_string(::getpid());
  d.key.add("not_cacheable", d.not_cacheable);
  d.key.add("nonce", nonce);
  d.key_value = d.key.key();
}

// Whether `r` compiled under jit::probe_name() gives what it gave under its
// own name (`out`): the output, the lowered names, and the log with the names
// swapped (compile/name_evidence.hpp). A probe that fails to compile differs.
bool same_under_another_directory(const CompileRequest& r, const Derived& d, const jit::BackendOutput& out) {
  CompileRequest probe = r;
  probe.name = jit::probe_name(r.name);
  auto other = jit::run_nvrtc(probe, d.options);
  return other && other->payload == out.payload && other->symbols == out.symbols &&
         jit::same_log(out.log, other->log, r.name, probe.name);
}

// For an NVRTC request: whether the inputs `d` names still held after the
// compile that started at `started_ns` (derived again, checked: for an
// unchecked `d` this is its one check). std::nullopt when they held (`d` may
// then be replaced by the derivation of the tree the compile read, see
// below), else why the result may not be kept.
std::optional<std::string> inputs_changed(const CompileRequest& r, Derived& d, bool checked, bool switch_key,
                                          std::int64_t started_ns) {
  auto again = derive_shared(r);
  if (again && (*again)->key_value == d.key_value) {
    return std::nullopt;
  }
  // `d` was a family member's result taken unchecked and the tree had
  // changed since that member was recorded. When nothing the new derivation
  // depends on changed since before the compile started (older than the racy
  // window), the compile read exactly that tree: its key.
  const bool before_compile = !checked && switch_key && again && (*again)->not_cacheable.empty() &&
                              (*again)->checks != nullptr && (*again)->scan_directory == d.scan_directory &&
                              jit::manifest_unchanged_since(*(*again)->checks->manifest, started_ns);
  if (before_compile) {
    d = **again;  // the callers report d.headers
    return std::nullopt;
  }
  return std::string(checked ? "a header changed while the compile ran"
                             : "a header changed shortly before or while the compile ran");
}

// After a compile that NVRTC rejected (`rejected`: NVRTC_ERROR_COMPILATION,
// the same error for the same inputs) ended in `e`: the negative entry of the
// request in `info->failed_entry`, when the request is cacheable, its log and
// message name no path under base_dir (a relative key would hand another
// checkout a log naming this one) and its inputs held while it ran.
void keep_failure(const CompileRequest& r, Derived& d, const Error& e, std::uint64_t duration, bool checked,
                  bool switch_key, std::int64_t started_ns, CompileInfo* info) {
  if (info == nullptr || !d.not_cacheable.empty() || e.code != ErrorCode::compile_failed) {
    return;
  }
  if (!d.base_dir.empty() &&
      (jit::output_names_base(e.log, d.base_dir) || jit::output_names_base(e.message, d.base_dir))) {
    return;
  }
  // A failure's log is its result, and it names the program with its
  // directory: under a key that leaves the directory out by evidence, it is
  // kept under the key with the directory (which compile() also looks up),
  // or, for a caller that looked up the evidence key itself, not at all.
  const KeyBuilder* key = &d.key;
  if (d.name_full_key && r.name.find('/') != std::string::npos) {
    if (!switch_key) {
      return;
    }
    key = d.name_full_key.get();
  }
  if (inputs_changed(r, d, checked, switch_key, started_ns)) {
    return;
  }
  info->failed_entry =
      make_failed_compile(*key, e, Producer{r.backend, d.version}, Target{d.arch, ""}, duration);
  info->key = info->failed_entry->passport.key;
}

// Runs the backend for an already derived request. `checked`: whether `d`'s
// disk identities were checked before the compile (false: the check after it
// is the only one, and when it fails the result may still be kept under the
// key of the tree the compile read, see below). `switch_key`: whether the
// result may be returned under another key than `d`'s (compile() may; a
// caller that looked up `d`'s key itself may not).
Result<Artifact> run_derived(const CompileRequest& r, Derived& d, CompileInfo* info, bool checked = true,
                             bool switch_key = false) {
  const std::int64_t started_ns = util::realtime_ns();
  const auto start = Clock::now();
  bool rejected = false;  // NVRTC rejected the program: a deterministic failure
  Result<jit::BackendOutput> out = [&]() {
    switch (d.library) {
      case ToolkitLibrary::nvrtc:
        return jit::run_nvrtc(r, d.options, &rejected);
      case ToolkitLibrary::nvjitlink:
        return jit::run_nvjitlink(r, d.options);
      case ToolkitLibrary::nvvm:
        return jit::run_nvvm(r, d.options);
    }
    return Result<jit::BackendOutput>(make_error(ErrorCode::internal, "unknown library"));
  }();
  const auto duration = micros_since(start);
  if (info != nullptr) {
    info->compile_us = duration;
  }
  if (!out) {
    if (rejected) {
      keep_failure(r, d, out.error(), duration, checked, switch_key, started_ns, info);
    }
    return tl::unexpected(out.error());
  }
  if (r.target_kind == "cubin") {
    if (auto ok = check_cubin(out->payload, d.arch); !ok) {
      return make_error(ErrorCode::compile_failed,
                        "the compiler returned a cubin that fails kcache's check: " + ok.error().message, out->log);
    }
  }
  bool cacheable = d.not_cacheable.empty();
  std::string reason = d.not_cacheable;
  // Kept under the evidence key only where another directory gives the same
  // bytes; else the key with the directory, from now on.
  bool keep_key = false;
  if (cacheable && d.name_full_key) {
    const auto t_probe = Clock::now();
    const bool same = same_under_another_directory(r, d, *out);
    if (info != nullptr) {
      info->evidence_us = micros_since(t_probe);
    }
    if (!same) {
      jit::remember_name_directory_matters(d.key_value.hex(), d.memo_dir);
      jit::DerivationMemo::instance().clear();
      if (switch_key) {
        d.key = *d.name_full_key;
        d.key_value = d.key.key();
        d.name_full_key.reset();
      } else {
        // The caller looked the evidence key up and keeps what comes back
        // under it: not cached this time; the next derivation keys the directory.
        cacheable = false;
        keep_key = true;
        reason = "the output depends on the program name's directory (another directory gave other bytes); "
                 "the next compile keys it with the directory";
      }
    }
  }
  if (cacheable && !d.base_dir.empty() && jit::output_names_base(out->payload, d.base_dir)) {
    // Keyed relative to base_dir, yet the output names a path under it (a
    // macro kcache did not see): never shared. Keyed absolute from now on.
    jit::remember_verdict(d.relative_key, d.memo_dir,
                          "absolute: the output names a path under base_dir");
    jit::DerivationMemo::instance().clear();
    cacheable = false;
    reason = "the output names a path under base_dir (" + d.base_dir +
             "), so it cannot be shared; the next compile keys it with absolute paths";
  }
  if (cacheable && r.backend == "nvrtc") {
    // A header edited while the compile ran would leave a binary that matches
    // neither version: keep the result out of the cache if anything changed.
    if (auto changed = inputs_changed(r, d, checked, switch_key, started_ns)) {
      cacheable = false;
      reason = std::move(*changed);
    }
  }
  if (!cacheable && d.not_cacheable.empty() && !keep_key) {
    d.not_cacheable = reason;
    make_unique_key(d);
  }
  Artifact a = Artifact::make(d.key, r.target_kind, std::move(out->payload), Producer{r.backend, d.version},
                              Target{d.arch, ""});
  a.passport.log = std::move(out->log);
  if (a.passport.log.size() > k_passport_max_log_bytes) {
    a.passport.log.resize(k_passport_max_log_bytes);
  }
  a.passport.symbols = std::move(out->symbols);
  a.passport.compile_duration_us = duration;
  if (info != nullptr) {
    info->key = a.passport.key;
    info->cacheable = cacheable;
    info->not_cacheable_reason = reason;
  }
  return a;
}

}  // namespace

struct HeaderList::State {
  std::once_flag made;
  std::function<std::vector<HeaderDependency>()> make;  // empty once made
  std::vector<HeaderDependency> list;
};

HeaderList::HeaderList(std::vector<HeaderDependency> headers) : m_size(headers.size()) {
  if (!headers.empty()) {
    m_state = std::make_shared<State>();
    m_state->list = std::move(headers);
    std::call_once(m_state->made, [] {});
  }
}

HeaderList::HeaderList(std::size_t size, std::function<std::vector<HeaderDependency>()> make) : m_size(size) {
  if (size != 0) {
    m_state = std::make_shared<State>();
    m_state->make = std::move(make);
  }
}

const std::vector<HeaderDependency>& HeaderList::vector() const {
  static const std::vector<HeaderDependency> none;
  if (!m_state) {
    return none;
  }
  std::call_once(m_state->made, [this] {
    m_state->list = m_state->make();
    m_state->make = nullptr;
  });
  return m_state->list;
}

namespace {

// derive_shared() of a request that can be cached; `unsupported` otherwise.
Result<SharedDerived> cacheable_derivation(const CompileRequest& request) {
  auto d = derive_shared(request);
  if (d && !(*d)->not_cacheable.empty()) {
    return make_error(ErrorCode::unsupported, "not cacheable: " + (*d)->not_cacheable);
  }
  return d;
}

}  // namespace

Result<KeyBuilder> derive_key(const CompileRequest& request, HeaderList* headers) {
  auto d = cacheable_derivation(request);
  if (!d) {
    return tl::unexpected(d.error());
  }
  if (headers != nullptr) {
    *headers = (*d)->headers;  // shared, not copied
  }
  return (*d)->key;
}

Result<Key> derive_request_key(const CompileRequest& request) {
  auto d = cacheable_derivation(request);
  if (!d) {
    return tl::unexpected(d.error());
  }
  return (*d)->key_value;
}

Result<KeyBuilder> derive_key(const CompileRequest& request, std::vector<HeaderDependency>* headers) {
  HeaderList list;
  auto key = derive_key(request, headers != nullptr ? &list : nullptr);
  if (key && headers != nullptr) {
    *headers = list.vector();
  }
  return key;
}

Result<Artifact> compile_uncached(const CompileRequest& request, CompileInfo* info) {
  // The caller derived the key a moment ago (derive_key): the check after the
  // compile is the one that matters, so the derivation is not checked twice.
  auto shared = derive_shared(request, Checks::deferred);
  if (!shared) {
    return tl::unexpected(shared.error());
  }
  Derived d = **shared;
  if (!d.not_cacheable.empty()) {
    make_unique_key(d);
  }
  const bool was_loaded = Toolkit::instance().is_loaded(d.library);
  auto a = run_derived(request, d, info, shared->checked);
  if (info != nullptr) {
    info->toolkit_loaded = !was_loaded && Toolkit::instance().is_loaded(d.library);
    if (a) {
      info->headers = std::move(d.headers);  // the compiled tree's
    }
  }
  return a;
}

Result<Artifact> compile_without_cache(const CompileRequest& request, CompileInfo* info) {
  CompileInfo local;
  CompileInfo& inf = info != nullptr ? *info : local;
  inf = CompileInfo{};
  // No key is derived: no header scanned or re-checked, no input hashed, no
  // memo read (compile/request_keys.hpp). The key is one no other request has.
  auto d = jit::derive_unkeyed(request);
  if (!d) {
    return tl::unexpected(d.error());
  }
  d->not_cacheable = std::string(k_compiled_without_cache);
  make_unique_key(*d);
  const bool was_loaded = Toolkit::instance().is_loaded(d->library);
  auto a = run_derived(request, *d, &inf);
  inf.toolkit_loaded = !was_loaded && Toolkit::instance().is_loaded(d->library);
  return a;
}

namespace {

// compile() without the counting of the request.
Result<Artifact> compile_through(const CompileRequest& request, Store* cache, CompileInfo& inf) {
  inf = CompileInfo{};
  // Deriving the key may load a library too (its version not remembered yet).
  const auto loads_before = Toolkit::instance().load_count();
  // A family member's result (another kernel over the same tree) is taken
  // unchecked and checked once: after the lookup on a hit, after the compile
  // on a miss (run_derived()). Where the check after a hit fails, the key is
  // derived again, checked, and looked up again.
  Checks checks = Checks::deferred;
  Result<SharedDerived> shared = tl::unexpected(Error{});
  std::optional<Derived> own;  // a copy only where it must change: not cacheable, or compiled below
  Key key;
  for (;;) {
    const auto t0 = Clock::now();
    shared = derive_shared(request, checks);
    inf.key_us += micros_since(t0);
    if (!shared) {
      return tl::unexpected(shared.error());
    }
    own.reset();
    if (!(*shared)->not_cacheable.empty()) {
      own.emplace(**shared);
      make_unique_key(*own);
      cache = nullptr;
    }
    key = own ? own->key_value : (*shared)->key_value;
    inf.key = key;
    if (cache == nullptr) {
      break;
    }
    const auto t1 = Clock::now();
    auto got = cache->get(key);
    if (got && !*got && !own && (*shared)->name_full_key) {
      // An evidence key missed: an entry stored with this very directory
      // (by a host that found the directory matters) answers too.
      key = (*shared)->name_full_key->key();
      got = cache->get(key);
      if (!got || !*got) {
        key = (*shared)->key_value;
      }
    }
    inf.key = key;
    inf.lookup_us += micros_since(t1);
    if (!got) {
      inf.store_warning = "cache lookup failed: " + got.error().describe();
    } else if (*got) {
      Artifact& a = **got;
      // The store verified the payload against the passport; check the passport
      // answers this request too (a key collision is impossible, a bug is not).
      // A negative entry answers it with the failure it holds (which must decode).
      const bool failed = is_failed_compile(a.passport);
      std::optional<Error> failure;
      if (failed) {
        if (auto e = failed_compile_error(a)) {
          failure = std::move(*e);
        }
      }
      bool ok = a.passport.key == key && (failed ? failure.has_value()
                                                 : a.passport.kind == request.target_kind &&
                                                       !holds_failed_compile(a.payload.view()));
      for (const auto& e : request.name_expressions) {
        ok = ok && (failed || a.passport.symbols.contains(e));
      }
      if (ok && !shared->checked) {
        const auto t2 = Clock::now();
        const bool holds = jit::derivation_still_holds(**shared);
        inf.key_us += micros_since(t2);  // the check belongs to deriving the key
        if (!holds) {
          checks = Checks::now;
          continue;
        }
      }
      if (ok) {
        inf.headers = (*shared)->headers;  // shared: no copy of the list on a hit
        inf.hit = true;
        inf.toolkit_loaded = Toolkit::instance().load_count() != loads_before;
        if (failure) {
          inf.served_failure = true;
          inf.failed_entry = std::move(a);
          return tl::unexpected(std::move(*failure));  // as the compile returned it
        }
        return std::move(a);
      }
      inf.store_warning = "cache entry " + key.hex() + " does not match the request; recompiling";
    }
    break;
  }
  const ToolkitLibrary library = (*shared)->library;
  if (!own) {
    own.emplace(**shared);
  }
  const bool was_loaded = Toolkit::instance().is_loaded(library);
  auto a = run_derived(request, *own, &inf, shared->checked, /*switch_key=*/true);
  inf.headers = std::move(own->headers);  // the compiled tree's (one copy of the list per compile)
  inf.toolkit_loaded = (!was_loaded && Toolkit::instance().is_loaded(library)) ||
                       Toolkit::instance().load_count() != loads_before;
  if (!a) {
    if (cache != nullptr && inf.failed_entry) {
      // A deterministic failure: kept, so the next request gets it without compiling.
      const auto t2 = Clock::now();
      auto put = cache->put(*inf.failed_entry);
      inf.store_us = micros_since(t2);
      if (put) {
        inf.stored = true;
        inf.store_queued = *put == PutOutcome::queued;
      } else {
        inf.store_warning = "could not store the failed compile: " + put.error().describe();
      }
    }
    return a;
  }
  if (inf.cacheable) {
    inf.key = a->passport.key;  // another key only where the tree changed before the compile (run_derived())
  }
  if (cache != nullptr && inf.cacheable) {
    const auto t2 = Clock::now();
    auto put = cache->put(*a);
    inf.store_us = micros_since(t2);
    if (put) {
      inf.stored = true;
      inf.store_queued = *put == PutOutcome::queued;
    } else {
      inf.store_warning = "could not store the result: " + put.error().describe();
    }
  }
  return a;
}

}  // namespace

Result<Artifact> compile(const CompileRequest& request, Store* cache, CompileInfo* info) {
  CompileInfo local;
  CompileInfo& inf = info != nullptr ? *info : local;
  Store::note_served_tier(std::nullopt);
  if (cache == nullptr || cache->disabled()) {
    // The user's compile, nothing around it; one uncached (or failed) request.
    auto a = compile_without_cache(request, &inf);
    record_request(cache, {}, a ? RequestOutcome::uncached : RequestOutcome::failed, std::nullopt, inf.compile_us);
    return a;
  }
  auto a = compile_through(request, cache, inf);
  // One request, counted by how it ended (kcache/request_stats.hpp): a
  // failure served from its negative entry is served, one stored is compiled.
  if (!a && inf.served_failure) {
    record_request(cache, {}, RequestOutcome::served_failure, served_tier(*cache),
                   inf.failed_entry ? inf.failed_entry->passport.compile_duration_us : 0);
  } else if (!a) {
    record_request(cache, {}, inf.stored ? RequestOutcome::compiled : RequestOutcome::failed, std::nullopt,
                   inf.compile_us);
  } else if (inf.hit) {
    record_request(cache, {}, RequestOutcome::served, served_tier(*cache), a->passport.compile_duration_us);
  } else {
    record_request(cache, {}, inf.stored ? RequestOutcome::compiled : RequestOutcome::uncached, std::nullopt,
                   inf.compile_us);
  }
  return a;
}

Result<void> check_cubin(std::string_view payload, std::string_view arch) {
  auto h = jit::read_cubin_header(payload);
  if (!h) {
    return tl::unexpected(h.error());
  }
  if (h->machine != jit::k_em_cuda) {
    return make_error(ErrorCode::corrupt,
                      "ELF e_machine is " + std::to_string(h->machine) + ", not 190 (EM_CUDA)");
  }
  const unsigned want = jit::arch_number(arch);
  if (want != 0 && h->sm != want) {
    return make_error(ErrorCode::corrupt, "cubin is for sm_" + std::to_string(h->sm) + " (e_flags 0x" +
                                              util::to_hex(reinterpret_cast<const std::uint8_t*>(&h->flags), 4) +
                                              "), not " + std::string(arch));
  }
  return {};
}

}  // namespace kcache

namespace kcache::jit {

void name_directory_matters_for(const CompileRequest& request) {
  auto d = derive_shared(request);
  if (d && (*d)->name_full_key) {
    remember_name_directory_matters((*d)->key_value.hex(), (*d)->memo_dir);
    DerivationMemo::instance().clear();
  }
}

}  // namespace kcache::jit
