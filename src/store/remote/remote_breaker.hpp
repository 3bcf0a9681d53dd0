// store/remote/remote_breaker.hpp: the circuit breaker and counters of one
// remote, shared by every process that uses one cache directory.
//
// A remote that is down or hung must cost one timeout per build, not one per
// process: the breaker's state lives in one small file per remote (with the
// remote's counters: the only file a remote adds to a cache directory), mapped
// MAP_SHARED and changed with lock-free 64-bit atomics (as v1/stats/counters),
// so that a breaker opened by one `kcache compile` is open for the next one.
// After the open time, one process wins the half-open probe (a compare-and-
// swap on the probe word) and the others keep skipping until its result.
//
// File: <cache_dir>/v1/stats/remote-<id> (format version 1, 1024 bytes,
// native endian, never exchanged between machines):
//
//   file     := header server state counters padding
//   header   := "KCBRK001" u32 version(=1) u32 size(=1024)          16 bytes
//   server   := the remote's masked server name, NUL-padded          256 bytes
//   state    := u64 failures        consecutive failures
//               u64 open_until_ms   wall-clock ms until which the remote is skipped; 0 = closed
//               u64 probe_until_ms  a half-open probe is in flight until then; 0 = none
//               u64 opened          times the breaker opened
//               u64 last_failure_ms u64 last_success_ms  u64 reserved[2]        64 bytes
//   counters := u64[64] in the order of RemoteCounter (remote_counters.hpp)     512 bytes
//   padding  := zero bytes up to 1024
//
//   id := the first 16 hex digits of SHA-256(server name)
//   server name := scheme "://" host[:port][/db] | path (no user, password or
//                  attributes): every process that talks to one server shares
//                  its breaker, whatever its credentials or timeouts
//
// A file of another size or with another header (damaged, or a future
// version) is replaced by a fresh one (written aside, renamed over it). Where
// the file cannot be created or mapped (read-only cache directory), the state
// lives in this process only (shared() is false). Within a process, every
// RemoteStore of one server (data tier, lease) shares one RemoteBreaker.
//
// Wall-clock times, so that processes agree on "until": an open_until or
// probe_until further in the future than the policy allows (a clock set
// back, a damaged word) counts as elapsed.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "store/remote/remote_counters.hpp"
#include "store/remote/remote_spec.hpp"

namespace kcache::remote {

struct BreakerPolicy {
  std::uint32_t failures = 3;         // failures in a row that open the breaker; 0: it never opens
  std::uint32_t seconds = 30;         // how long an open breaker skips the remote
  std::uint64_t probe_ms = 5000;      // the longest a half-open probe may take (a dead prober's claim lapses)
};

// What admit() decided.
enum class BreakerAdmit {
  closed,  // go on
  probe,   // go on: this call is the one half-open probe (its result opens or closes the breaker)
  open,    // skip: the breaker is open, or another caller is probing
};

// A copy of the breaker's words.
struct BreakerState {
  std::uint64_t failures = 0;
  std::uint64_t open_until_ms = 0;
  std::uint64_t probe_until_ms = 0;
  std::uint64_t opened = 0;
  std::uint64_t last_failure_ms = 0;
  std::uint64_t last_success_ms = 0;
};

class RemoteBreaker {
 public:
  static constexpr std::size_t k_file_size = 1024;

  // The breaker of `spec`'s server for this process: the one already open in
  // this process for the same `stats_dir` and server, else a new one over
  // <stats_dir>/remote-<id> (created 0600, 0660 with `group_shared`). An empty
  // `stats_dir` gives a private in-process breaker. Never fails.
  static std::shared_ptr<RemoteBreaker> open(const std::filesystem::path& stats_dir, const RemoteSpec& spec,
                                             bool group_shared = false);
  // A read-only view of an existing file (for `kcache stats`). Null when it is
  // missing, damaged or of another version.
  static std::unique_ptr<RemoteBreaker> open_for_reading(const std::filesystem::path& file);
  // Read-only views of every remote's file in `stats_dir` (remote-<id>),
  // sorted by server; damaged files and temporaries are left out. Empty when
  // there is none or the directory cannot be read.
  static std::vector<std::unique_ptr<RemoteBreaker>> open_all_for_reading(const std::filesystem::path& stats_dir);

  // The server name that identifies a remote's breaker, and its file name.
  static std::string server_name(const RemoteSpec& spec);
  static std::string file_name(const RemoteSpec& spec);

  ~RemoteBreaker();
  RemoteBreaker(const RemoteBreaker&) = delete;
  RemoteBreaker& operator=(const RemoteBreaker&) = delete;

  // Whether an operation may go to the server now (see BreakerAdmit).
  BreakerAdmit admit(const BreakerPolicy& policy) noexcept;
  // An operation succeeded: the breaker closes.
  void succeeded() noexcept;
  // An operation failed. `hung`: it waited out its timeout (a server that
  // accepts and never answers): the breaker opens at once, unless the policy
  // never opens it; otherwise it opens after policy.failures in a row.
  // Returns true when this call opened a closed (or lapsed) breaker.
  bool failed(const BreakerPolicy& policy, bool hung) noexcept;

  BreakerState state() const noexcept;
  // The per-remote counters in the same file.
  RemoteCounters& counters() noexcept { return *m_counters; }
  const RemoteCounters& counters() const noexcept { return *m_counters; }
  const std::string& server() const noexcept { return m_server; }
  bool shared() const noexcept { return m_mapped != nullptr; }

  // Wall-clock milliseconds since the epoch.
  static std::uint64_t now_ms() noexcept;

 private:
  RemoteBreaker() = default;
  std::uint64_t* word(unsigned index) const noexcept;

  void* m_mapped = nullptr;
  std::unique_ptr<std::uint64_t[]> m_local;  // when not mapped: the file's words, in this process
  std::unique_ptr<RemoteCounters> m_counters;
  std::string m_server;
};

}  // namespace kcache::remote
