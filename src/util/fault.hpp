// util/fault.hpp: the fault-injection seam behind every file I/O call.
//
// Every call in util/posix_io.hpp asks fault::check() first. When the seam is
// armed (by the KCACHE_FAULT environment variable, read once at first use, or
// by fault::configure() in tests), the Nth call of an operation fails with a
// chosen errno, transfers fewer bytes, or SIGKILLs the process. Disarmed, the
// check is one relaxed atomic load.
//
// Grammar (docs/fault-injection.md):
//
//   KCACHE_FAULT := rule (';' rule)*
//   rule         := field (',' field)*
//   field        := 'op=' OP | 'nth=' N | 'count=' M | 'every=' K | 'err=' ERRNO
//                 | 'action=' ACTION
//   OP           := open | read | write | fsync | rename | unlink | mkdir | stat
//                 | lock | chmod | utime | link | truncate | any
//   ACTION       := fail (default) | kill | short | eintr
//   N            := 1.. (default 1): the first call (of OP, counted per process) hit
//   M            := 0.. (default 1): how many calls are hit; 0 = all from N on
//   K            := 1.. (default 1): hit calls N, N+K, N+2K, ...
//   ERRNO        := EIO (default) | ENOSPC | EDQUOT | EACCES | EPERM | EROFS | EINTR
//                 | ENOENT | EEXIST | EMFILE | ENOMEM | EAGAIN
//
// `short` makes a read or write transfer at most half the bytes asked (at
// least 1); on other operations it acts as `fail`. `eintr` is `err=EINTR`.
// The first rule that matches a call decides it.
// A malformed KCACHE_FAULT is reported on stderr once and ignored.
//
// Thread-safety: check() and the counters are thread-safe; configure() and
// reset() must not race with I/O (call them between operations in tests).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kcache::util::fault {

enum class Op : unsigned {
  open, read, write, fsync, rename, unlink, mkdir, stat, lock, chmod, utime, link, truncate,
  count_  // not an operation: the number of operations
};

enum class Action { none, fail, short_transfer };

// What the seam decided for one call: `none` (go ahead), `fail` with `err`, or
// `short_transfer`. A `kill` rule never returns: the process is SIGKILLed.
struct Decision {
  Action action = Action::none;
  int err = 0;
};

namespace detail {
extern std::atomic<bool> g_armed;  // written only by configure()/reset()/the first-use env read
Decision check_slow(Op op) noexcept;
void init_from_env() noexcept;
}  // namespace detail

// Counts the call and says what to do with it.
inline Decision check(Op op) noexcept {
  detail::init_from_env();
  if (!detail::g_armed.load(std::memory_order_relaxed)) {
    return {};
  }
  return detail::check_slow(op);
}

// Replaces the rules with `spec` (same grammar as KCACHE_FAULT) and zeroes the
// call counters. Returns false (and disarms) when `spec` does not parse.
bool configure(std::string_view spec);

// Disarms the seam and zeroes the counters.
void reset();

// How many faults were injected since the last configure()/reset().
std::uint64_t injected();

// How many calls of `op` were counted since the last configure()/reset()
// (only counted while armed).
std::uint64_t calls(Op op);

// The name used in the grammar ("fsync"), for reports.
std::string_view to_string(Op op) noexcept;

}  // namespace kcache::util::fault
