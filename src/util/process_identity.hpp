// util/process_identity.hpp: who a process is, written into a file name so
// that another process can later tell whether that writer is still running.
//
// A pid alone is not enough: pids are reused, and a pid means nothing in
// another pid namespace (a container sharing the directory) or on another
// machine (a directory on NFS). An identity is therefore three numbers:
//
//   pid     the process id (getpid())
//   start   the process's start time, in clock ticks after boot (field 22 of
//           /proc/PID/stat): a reused pid has another start time
//   domain  64 bits of a hash of the boot id and the pid namespace: where the
//           pid means something. 0 when /proc cannot be read; such an
//           identity is never judged.
//
// Text form: "<pid>-<start>-<domain as 16 lowercase hex>".
//
// Thread-safety: every function is thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kcache::util {

struct ProcessIdentity {
  pid_t pid = 0;
  std::uint64_t start = 0;
  std::uint64_t domain = 0;

  // "<pid>-<start>-<domain hex16>".
  std::string to_string() const;
  // Parses the text form at the start of `text`; `rest` receives what follows
  // it. Returns nullopt unless `text` starts with a well-formed identity.
  static std::optional<ProcessIdentity> parse(std::string_view text, std::string_view& rest);
};

// The identity of the calling process. Computed on first use and again after
// a fork (the pid changed); costs nothing after that.
ProcessIdentity current_process_identity();

// What can be said of the process an identity names.
enum class Liveness {
  alive,    // it runs (or it exists and its start time cannot be read: assumed alive)
  gone,     // it has exited (a zombie counts as gone: it writes nothing more),
            // or its pid now belongs to a process that started at another time
  unknown,  // its pid belongs to another machine, boot or pid namespace, or
            // the identity has no domain: nothing can be said
};

// How much liveness_of() looks at.
enum class PidCheck {
  exists,  // kill(pid, 0) only: gone when no process has the pid (one system call;
           // a reused pid reads as alive)
  full,    // also /proc/PID/stat: a reused pid or a zombie reads as gone
};

// Judges `id` from this process: only an identity of this boot and pid
// namespace is judged, by kill(pid, 0) and (PidCheck::full) /proc/PID/stat.
// Never says gone for a running process.
Liveness liveness_of(const ProcessIdentity& id, PidCheck check = PidCheck::full);

}  // namespace kcache::util
