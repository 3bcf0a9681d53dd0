// nvcc/child_process.hpp: running nvcc and the host compiler (private).
//
// run_captured() runs a program with its standard output and error captured
// (each bounded; what is past the bound is read and dropped, and counted as
// truncated) and standard input from /dev/null. The child is tied to this
// process (util/tied_child.hpp): if kcache dies, so does nvcc.
// exec_program() replaces this process with the program (a command kcache
// does not cache runs exactly as nvcc would run it, its exit status its own).
//
// Thread-safety: thread-safe (no shared state beyond util/tied_child's spawner).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kcache/error.hpp"

namespace kcache::nvcc {

struct ChildOutput {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string out;     // standard output
  std::string err;     // standard error
  bool truncated = false;  // one of them was longer than the bound
  // The status a shell would report: the exit code, or 128 + the signal.
  int status() const noexcept { return signal != 0 ? 128 + signal : exit_code; }
};

// Runs `argv` (argv[0] included) from `executable`. Fails only when the
// program cannot be started (not_found, io).
Result<ChildOutput> run_captured(const std::filesystem::path& executable, const std::vector<std::string>& argv,
                                 std::size_t max_bytes = std::size_t{64} << 20);

// Replaces this process with `executable` run with `argv`. Returns only on
// failure, with the errno of execv.
int exec_program(const std::filesystem::path& executable, const std::vector<std::string>& argv);

// Writes all of `bytes` to descriptor `fd` (standard output or error),
// retrying short writes. Returns false when the write failed.
bool write_fully(int fd, std::string_view bytes);

}  // namespace kcache::nvcc
