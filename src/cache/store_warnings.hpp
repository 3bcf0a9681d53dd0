// cache/store_warnings.hpp: where the stores that open_configured_store opens,
// and the caches and compiles that use them, print their warnings, so that one
// failure is said once per process (DESIGN rule 3; docs/configuration.md,
// "When the cache is broken").
//
// A tier that fails says so itself, once, with what to do about it (a
// FileStore that cannot be written, a remote that is down or holds a bad
// object): its line is always printed. The layers around the tiers (the
// tiered chain, the write-behind queue, a cache's publish and single-flight
// lock, a compile's store warning) meet the same failure again and would only
// repeat it in vaguer words, often before the tier itself meets it (a
// single-flight lock file that cannot be created comes before the put that
// fails): the first layer line is held back, and printed only when no tier
// line has come by flush() (the end of the command, or the end of the
// process); any later layer line is dropped. A read-only cache is thus one
// line per `kcache` command, whatever order the failures come in and however
// many layers (and worker processes, which never touch the store) it passes
// through.
//
// Lines go to stderr with a "kcache: warning: " prefix.
//
// Thread-safety: thread-safe; the state is per process.
#pragma once

#include <functional>
#include <string>

namespace kcache::store_warnings {

enum class Source {
  tier,   // a store that failed, saying what failed and what to do: always printed
  layer,  // a layer around the stores meeting a failure: printed only as the first line
};

// Prints `line` as a warning, or drops it (see above).
void warn(Source source, const std::string& line);

// Prints the held-back layer line, if any and if no tier line was printed.
// Called by the kcache command after each command, and at process exit.
void flush();

// warn() bound to `source`, for the `warn` member of store and cache options.
std::function<void(const std::string&)> sink(Source source);

}  // namespace kcache::store_warnings
