// util/unique_name.hpp: names for temporary files that no other writer picks.
//
// A temporary name needs to differ from every other writer's, not to be
// secret: the pid separates processes, and a per-process nonce plus a counter
// separates a reused pid and the calls of one process. Files are created with
// O_EXCL, so a clash can only cost a retry, never a clobbered file.
// std::random_device is not used on these paths: it probes the CPU with CPUID,
// which traps to the hypervisor in a virtual machine and cost more than the
// rest of a cache hit's set-up.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace kcache::util {

// A 64-bit value that differs between processes and between calls: the pid, a
// nanosecond clock, an address randomised by ASLR and a counter, mixed.
std::uint64_t unique_nonce() noexcept;

// "<pid>-<16 hex>": a suffix for a temporary file name.
std::string temp_suffix();

}  // namespace kcache::util
