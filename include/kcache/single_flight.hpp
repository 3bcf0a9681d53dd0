// kcache/single_flight.hpp: one holder per key, across threads and processes.
//
// A SingleFlight hands out at most one Lease per key at a time:
// - among threads of this process, through an in-process table (waiters sleep
//   on a condition variable and wake as soon as the holder releases);
// - among processes on this machine, through an open-file-description lock
//   (fcntl F_OFD_SETLK) on `<lock_dir>/<key>.lock`. The kernel drops the lock
//   when the holder's descriptor closes, so a holder that dies (even by
//   SIGKILL) releases its keys at once and a waiter takes over.
//
// Lock files: `<lock_dir>` is `<cache_dir>/v1/locks/` (docs/on-disk-format.md
// reserves it). A lock file is named `<64 hex key>.lock`, opened with
// O_NOFOLLOW, mode 0600 (0660 in group sharing). A holder unlinks its lock
// file before it releases, and every acquirer checks after locking that the
// path still names the inode it locked (retrying otherwise), so lock files do
// not pile up and unlinking never lets two holders in. A file left by a killed
// holder is reused and removed by the next holder. The directory itself is
// made by the first acquire that finds it missing (an acquirer whose open
// fails with ENOENT makes it and tries again), so a process that only hits
// makes none.
//
// Waiting across processes polls the lock with a short backoff (1 ms doubling
// to 8 ms), so a waiter notices a release within about 8 ms; waiting among
// threads is immediate. Not for use across hosts (flock/OFD locks are not
// reliable on NFS); remote leases are a later part.
//
// Thread-safety: every method is thread-safe. A Lease is a move-only value
// that must be released (or destroyed) by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "kcache/error.hpp"
#include "kcache/key.hpp"

namespace kcache {

class SingleFlight;

// Holds the per-key lock until release() or destruction.
class Lease {
 public:
  Lease() = default;
  ~Lease();
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // True while this lease holds its key.
  bool held() const noexcept;
  // True when acquire() had to wait for another holder (thread or process):
  // the caller should look in the store again before compiling.
  bool waited() const noexcept { return m_waited; }
  const Key& key() const noexcept { return m_key; }

  // Removes the lock file and releases the key (process lock first, then the
  // thread lock). Idempotent. Never fails; errors removing the file are ignored
  // (the next holder removes it).
  void release() noexcept;

 private:
  friend class SingleFlight;
  struct State;
  Lease(std::unique_ptr<State> state, Key key, bool waited) noexcept;
  std::unique_ptr<State> m_state;
  Key m_key;
  bool m_waited = false;
};

// Whether a lease is shared with other processes.
enum class LockScope {
  threads,                // this process only (no lock directory)
  threads_and_processes,  // plus OFD locks under the lock directory
};

class SingleFlight {
 public:
  // With an empty `lock_dir`, leases exclude threads of this process only.
  // Otherwise `lock_dir` is created (mode 0700, or `dir_mode`) by the first
  // acquire that needs it.
  explicit SingleFlight(std::filesystem::path lock_dir = {}, unsigned dir_mode = 0700);
  ~SingleFlight();
  SingleFlight(const SingleFlight&) = delete;
  SingleFlight& operator=(const SingleFlight&) = delete;

  // Waits up to `timeout` to become the holder of `key`.
  // Success: a held Lease (waited() says whether someone else held it first).
  // Failure: timeout when another holder kept the key for the whole wait;
  // io/permission_denied when the lock file cannot be opened or locked (the
  // caller may then go on without the process lock: a broken lock directory
  // must never break a compile). The thread lock is not held on failure.
  //
  // `stop_waiting`, when given, is called between polls while another process
  // holds the key (every 1-8 ms); when it returns true the wait ends with a
  // Lease that is NOT held (held() == false, waited() == true). The cache uses
  // it to notice the holder's published entry without queueing for the lock.
  Result<Lease> acquire(const Key& key, std::chrono::milliseconds timeout,
                        const std::function<bool()>& stop_waiting = {});

  LockScope scope() const noexcept;
  // The lock file of `key` (empty path with LockScope::threads).
  std::filesystem::path lock_path(const Key& key) const;

 private:
  friend class Lease;
  struct Impl;
  std::shared_ptr<Impl> m_impl;  // shared with outstanding leases, which may outlive this object
};

}  // namespace kcache
