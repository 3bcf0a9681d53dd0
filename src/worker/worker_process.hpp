// worker/worker_process.hpp: the worker side of the protocol (private).
//
// `kcache worker` calls serve(): it moves the protocol off fd 1 (so stray
// prints from a compiler library cannot corrupt a frame: fd 1 then points at
// stderr), sends hello, and answers compile frames one at a time until end of
// input or a shutdown frame.
//
// Test-only fault injection (TESTING W01), honoured only here:
//   KCACHE_WORKER_FAULT=<mode>[@<program name>]
//   mode := crash (SIGSEGV) | abort (SIGABRT) | exit (exit 3, no reply) | hang
//         | garbage (junk instead of a frame) | truncate (half a frame, then exit)
//         | oom (allocate under a 256 MiB address-space limit until it fails)
// With `@name` only requests whose CompileRequest::name equals `name` misbehave.
#pragma once

#include "kcache/cache.hpp"

namespace kcache::worker {

// Serves requests on `in_fd` / `out_fd`. Returns the process exit code:
// 0 after end of input or shutdown, 1 on a protocol error from the parent.
int serve(int in_fd, int out_fd, const CompileFunction& compile);

}  // namespace kcache::worker
