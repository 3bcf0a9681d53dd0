// util/single_threaded.hpp: whether the process has had only one thread.
//
// The first thread a process creates makes glibc lock every stdio call from
// then on (`__libc_single_threaded` never returns to true), and NVRTC reads its
// headers a character at a time through stdio: every later compile of a
// header-heavy kernel is 1-2 % slower (docs/run.md, "No thread in a
// single-threaded program"). kcache starts a helper thread in such a process
// only where it takes much more than that off the caller's path.
//
// Thread-safety: thread-safe (one read of glibc's flag).
#pragma once

#include <sys/single_threaded.h>

namespace kcache::util {

// True while this process has never had a second thread.
inline bool process_is_single_threaded() noexcept { return __libc_single_threaded != 0; }

}  // namespace kcache::util
