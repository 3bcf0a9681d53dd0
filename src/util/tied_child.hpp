// util/tied_child.hpp: child processes that die with the process that started them.
//
// A child started here gets SIGKILL from the kernel when this process dies,
// however it dies (SIGKILL, the OOM killer, a crash): Linux's parent-death
// signal (PR_SET_PDEATHSIG). The kernel sends that signal when the *thread*
// that forked the child ends, not the process, so every child is forked by one
// long-lived spawner thread that lives until the process exits; the calling
// thread may end at any time. The child checks getppid() after asking for the
// signal, so a parent that died between fork and prctl is noticed too.
//
// Thread-safety: thread-safe (calls are serialised on the spawner thread).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kcache/error.hpp"

namespace kcache::util {

struct TiedChildSpec {
  // The program to run: a path (no PATH search).
  std::filesystem::path executable;
  // argv, argv[0] included.
  std::vector<std::string> argv;
  // The environment ("NAME=VALUE" strings); null: this process's environment.
  const std::vector<std::string>* env = nullptr;
  // (descriptor in this process, descriptor number in the child), applied with
  // dup2 in order. Every other descriptor above 2 is closed in the child.
  std::vector<std::pair<int, int>> fds;
};

// Starts `spec` as a child of this process that is killed (SIGKILL) when this
// process dies. Signal mask and dispositions are reset to the defaults in the
// child. Returns the child's pid (reap it with waitpid as usual); an Error
// when it could not be started (not_found when `executable` does not exist,
// io otherwise; the child's exec error is reported, not a silent exit 127).
Result<pid_t> spawn_tied_child(const TiedChildSpec& spec);

// Finds `name` on $PATH like execvp would (a name with a slash is taken as a
// path). Returns the path of the first executable regular file, or not_found.
Result<std::filesystem::path> find_program(const std::string& name);

}  // namespace kcache::util
