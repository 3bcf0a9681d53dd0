// kcache/compiler.hpp: compile requests through the cache.
//
// Three steps, usable on their own (the worker pool and single-flight cache
// build on them):
//
//   derive_key(request)        the complete key of a request, WITHOUT loading
//                              the toolkit (docs/keys.md lists every field)
//   compile_uncached(request)  runs the backend (loads the toolkit) and returns
//                              an artifact whose passport holds the key, the key
//                              record, the log, producer and version, target
//                              arch, compile duration and symbol map
//   compile(request, store)    lookup -> hit: return (no toolkit load) ->
//                              miss: compile_uncached, put, return
//   compile_without_cache(request)  the backend alone: no key, no header scan
//                              (compile() without a store, a disabled cache)
//
// Headers read from disk are found by scanning the source and every header it
// can reach for #include / __has_include directives, resolving each against
// the same search path NVRTC uses (in-memory headers first, then the includer's
// directory, then each --include-path). Every file that exists on any
// candidate path goes into the key by content, so the set is a superset of
// what the compile reads. Headers under the CUDA home are covered by the
// toolkit fingerprint instead, but a user file that a toolkit header would
// include through the search path is in the key. Computed includes
// (`#include MACRO(x)`) are expanded with every definition of their macros.
// Only a computed include whose expansions kcache cannot bound makes the
// request not cacheable: derive_key returns `unsupported` and compile()
// compiles without the cache. What a scan found is remembered (in memory and
// under $KCACHE_DIR/v1/headers), so a hit re-checks file identities only
// (docs/keys.md, "Disk headers").
//
// Thread-safety: all functions are thread-safe (the header memo is shared and
// locked; backend calls are serialised per library where it requires it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/artifact.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/store.hpp"

namespace kcache {

// A header read from disk that went into a key.
struct HeaderDependency {
  std::string path;    // as it would be opened (include dir + name), not canonicalised
  std::string sha256;  // 64 hex
  friend bool operator==(const HeaderDependency&, const HeaderDependency&) = default;
};

// The disk headers in a key: an immutable list, shared (never copied) by the
// derivation that found it and every CompileInfo that reports it, and made
// only when first read: a hit over a large tree (CuPy's: ~900 headers) whose
// caller never looks at the list builds no string of it. Reads like a const
// std::vector.
//
// Thread-safety: a value; copies share the list, which is made at most once
// (whichever copy reads it first) and never changes.
class HeaderList {
 public:
  using value_type = HeaderDependency;
  using const_iterator = std::vector<HeaderDependency>::const_iterator;

  HeaderList() = default;
  // Takes `headers` (moved in: no copy of the strings).
  HeaderList(std::vector<HeaderDependency> headers);  // NOLINT(google-explicit-constructor): a list reads as one
  // A list of `size` headers that `make` returns when one is first read
  // (`make` runs at most once, on the thread that reads first).
  HeaderList(std::size_t size, std::function<std::vector<HeaderDependency>()> make);

  const std::vector<HeaderDependency>& vector() const;
  const_iterator begin() const { return vector().begin(); }
  const_iterator end() const { return vector().end(); }
  std::size_t size() const { return m_size; }  // known without making the list
  bool empty() const { return m_size == 0; }
  const HeaderDependency& operator[](std::size_t i) const { return vector()[i]; }
  const HeaderDependency& front() const { return vector().front(); }
  const HeaderDependency& back() const { return vector().back(); }

  friend bool operator==(const HeaderList& a, const HeaderList& b) { return a.vector() == b.vector(); }
  friend bool operator==(const HeaderList& a, const std::vector<HeaderDependency>& b) { return a.vector() == b; }

 private:
  struct State;
  std::shared_ptr<State> m_state;
  std::size_t m_size = 0;
};

// What a compile() call did, for --explain, --json and stats.
struct CompileInfo {
  Key key;
  bool hit = false;          // served from the store
  bool cacheable = true;     // false: compiled without the cache (see `not_cacheable_reason`)
  std::string not_cacheable_reason;
  bool stored = false;       // the store accepted the artifact (published, or queued: see below)
  // The store queued the artifact to publish after compile() returned
  // (WriteBehindStore). A failure then is warned about and counted by the
  // store (WriteBehindStats), never reported here.
  bool store_queued = false;
  bool toolkit_loaded = false;  // this call loaded a toolkit library (a miss on a cold process)
  std::string store_warning;    // a store error that was skipped (the compile still succeeded)
  HeaderList headers;  // disk headers in the key (shared with the derivation: see HeaderList)
  std::uint64_t key_us = 0;      // time to derive the key (headers included)
  std::uint64_t lookup_us = 0;   // store get
  std::uint64_t compile_us = 0;  // backend
  // The probe compile under another directory that an evidence key needs
  // (docs/keys.md, "The program name"); 0 when none ran. Not in compile_us.
  std::uint64_t evidence_us = 0;
  std::uint64_t store_us = 0;    // store put: the time this call waited for it (with a
                                 // write-behind store: checking and queueing, not the disk write)
  // Set when the compile failed deterministically (NVRTC rejected the
  // program: NVRTC_ERROR_COMPILATION) and its inputs held while it ran: the
  // negative entry (kind "failed-compile", under the key a success would have
  // had; docs/keys.md, "Failed compiles") that compile() stores and serves as
  // the same error. compile_uncached() fills it for a caller that stores
  // results itself (the Cache: compile_in_process). On a hit on a negative
  // entry (`served_failure`), the entry served.
  std::optional<Artifact> failed_entry;
  // A hit on a negative entry: compile() returned the stored failure.
  bool served_failure = false;
};

// Derives the complete key of `request` without loading the toolkit (the
// library version comes from the identity memo; only the very first use of a
// library on a machine loads it to ask). Success: the KeyBuilder holding the
// key and its record; `headers`, when given, receives the disk headers in the
// key. Failure: invalid_argument (bad request, unknown backend or target),
// unsupported (a side-effect option, or a computed include kcache cannot
// bound: not cacheable), toolkit_missing, io (a header vanished while being read).
Result<KeyBuilder> derive_key(const CompileRequest& request,
                              std::vector<HeaderDependency>* headers = nullptr);
// The same; `headers` receives the list shared, not copied.
Result<KeyBuilder> derive_key(const CompileRequest& request, HeaderList* headers);
// The key alone (derive_key(request)->key()), as the derivation computed it
// once: a repeat of a request within the process copies no record and hashes
// nothing again. Failures as derive_key's.
Result<Key> derive_request_key(const CompileRequest& request);

// Runs the backend for `request` (loads the toolkit on first use) and returns
// the artifact. Its passport holds the key of derive_key(request), the key
// record, the log, producer and run-time version, target arch, compile
// duration and symbol map (name expression -> lowered name). A cubin output is
// checked before it is returned: ELF64, e_machine 190 (EM_CUDA) and the SM
// number of the requested arch in e_flags bits 8-15.
// `info`, when given, gets cacheable=false when the request is not cacheable
// or when a disk header changed while the compile ran (the inputs no longer
// match the key): such an artifact must not be put into a store.
// Failure: compile_failed with the compiler's log in Error::log, plus the
// errors of derive_key. Nothing is cached here; a deterministic failure of a
// cacheable request leaves its negative entry in `info->failed_entry`.
Result<Artifact> compile_uncached(const CompileRequest& request, CompileInfo* info = nullptr);

// Runs the backend for `request` and nothing else: the user's compile, as a
// program would call NVRTC (nvJitLink, libNVVM) itself. The options are
// checked and handed over in the library's own spelling (the same list a
// cached compile of `request` hands it), the request's in-memory headers and
// name expressions as given; no key is derived, so no header is scanned or
// re-checked, no input hashed and no memo read or written. The artifact's
// passport has a key no other request has (a key record with `not_cacheable`
// "compiled without a cache" and a nonce), so it is never a hit anywhere;
// `info` gets cacheable=false with that reason. A cubin is checked as by
// compile_uncached(). Failure: invalid_argument (bad request, options or
// target), toolkit_missing, compile_failed with the log. Thread-safe.
Result<Artifact> compile_without_cache(const CompileRequest& request, CompileInfo* info = nullptr);

// Compiles `request` through `cache`: derive the key, get; on a hit return
// the stored artifact (the toolkit is not loaded); on a miss compile, put, and
// return. A null `cache`, or the store of a cache that is turned off
// (Store::disabled()), compiles with compile_without_cache(). Store errors are
// never fatal: they are reported in `info->store_warning` and the compile
// result is returned. A failed compile returns compile_failed with the log;
// when NVRTC rejected the program (NVRTC_ERROR_COMPILATION) and the inputs
// held, the failure is stored as a negative entry under the request's key, and
// a later call with the same inputs gets the same error (code, message, log)
// from it without compiling (`info->hit` and `info->served_failure` true).
// Any other failure (no toolkit, out of memory, an internal error) is never
// stored. Thread-safe; concurrent misses of one key may compile twice (use the
// single-flight Cache for one compile per key).
Result<Artifact> compile(const CompileRequest& request, Store* cache, CompileInfo* info = nullptr);

// Checks that `payload` is a CUDA cubin for `arch` ("sm_90", "sm_90a"): ELF64,
// e_machine 190, SM number in e_flags bits 8-15. Returns corrupt naming the
// first mismatch.
Result<void> check_cubin(std::string_view payload, std::string_view arch);

}  // namespace kcache
