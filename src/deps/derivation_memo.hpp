// deps/derivation_memo.hpp: derivations remembered within one process (private).
//
// Deriving an NVRTC request's key reads the toolkit's identity, canonicalises
// the options, hashes the source and the in-memory headers, scans (or
// re-checks the manifest of) the disk headers and hashes the key record. A
// process that compiles the same request again (a JIT that asks for its
// kernels on every launch) needs none of that again as long as nothing it
// depended on changed. The memo keeps, per request (compared whole, byte for
// byte: a digest only picks the slot), the finished derivation and re-checks
// on every lookup exactly what could have changed since:
//   - the toolkit configuration (Toolkit::generation());
//   - the working directory the header names were resolved against
//     (`getcwd`), and the one NVRTC writes into the output when the key holds
//     it (jit::nvrtc_working_directory(): `$PWD` or `getcwd`);
//   - the stat identity of every disk header and of every directory outside
//     the toolkit that decided a candidate was absent (reuse_checks() in
//     deps/header_scanner.hpp; toolkit directories are trusted for the life
//     of the process, like the toolkit fingerprint).
// Anything changed: a miss, and the caller derives afresh (re-using the
// header manifest where it still applies).
//
// Bounded: at most k_max_entries requests and k_max_bytes of their sources
// and in-memory headers; when either would be exceeded the memo starts over.
//
// Thread-safety: every member is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "deps/derivation.hpp"
#include "kcache/compile_request.hpp"

namespace kcache::jit {

// Whether `d` still holds: the working directories it depends on are the
// same and its disk identities (Derivation::checks) are unchanged. False when
// it has no checks (it cannot be re-checked without deriving again).
bool derivation_still_holds(const Derivation& d);

class DerivationMemo {
 public:
  static constexpr std::size_t k_max_entries = 1024;
  static constexpr std::size_t k_max_bytes = std::size_t{64} << 20;

  static DerivationMemo& instance();

  // The derivation remembered for exactly `request` under toolkit
  // configuration `generation`, when every input it depended on is unchanged;
  // null otherwise (never remembered, or something changed). With `check`
  // false the disk identities (Derivation::checks) are not checked, only the
  // working directories: the caller runs derivation_still_holds() before it
  // trusts the key.
  std::shared_ptr<const Derivation> find(const CompileRequest& request, std::uint64_t generation,
                                         bool check = true);

  // Remembers `derivation` for `request`. Ignored unless it is cacheable and
  // carries its re-checks (Derivation::checks).
  void remember(const CompileRequest& request, std::uint64_t generation,
                std::shared_ptr<const Derivation> derivation);

  // Forgets everything (tests, benchmarks; forget_scan_memos()).
  void clear();

 private:
  struct Entry {
    CompileRequest request;
    std::uint64_t generation = 0;
    std::shared_ptr<const Derivation> derivation;
    std::size_t bytes = 0;
  };

  std::mutex m_mutex;
  std::unordered_map<std::uint64_t, Entry> m_entries;  // by request_digest()
  std::size_t m_bytes = 0;
};

}  // namespace kcache::jit
