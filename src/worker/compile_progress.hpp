// worker/compile_progress.hpp: progress output for multi-file compiles
// (`kcache compile a.cu b.cu ... -j N`), for the CLI.
//
// On a terminal: one bar redrawn in place ("[#####.....] 12/64 a.cu"), ended
// with a newline after the last request. Otherwise plain lines:
//   "[12/64] ok a.cu" / "[13/64] FAILED b.cu: compile_failed: ..."
#pragma once

#include <cstdio>

#include "kcache/worker_pool.hpp"

namespace kcache::worker {

enum class ProgressStyle { bar, lines };

// Returns the style for `stream`: bar when it is a terminal, lines otherwise.
ProgressStyle progress_style_for(std::FILE* stream) noexcept;

// Returns a CompileProgress that writes to `stream` (not owned; must outlive it).
CompileProgress make_progress_printer(std::FILE* stream, ProgressStyle style);

}  // namespace kcache::worker
