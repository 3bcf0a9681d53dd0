// plan/process.hpp: run an external tool with a timeout.
//
// The child runs in its own process group with stdin from /dev/null and
// stdout+stderr appended to a log file; on timeout the whole group gets
// SIGKILL. Thread-safe: each call owns its child.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "kcache/error.hpp"

namespace kcache::plan {

struct ProcessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  bool ok() const noexcept { return !timed_out && signal == 0 && exit_code == 0; }
  // "exited with status 3", "killed by signal 9", "timed out after 5 s"
  std::string describe(std::chrono::seconds timeout) const;
};

// Runs `argv` (argv[0] found on PATH when it has no slash) in `cwd`. Returns
// the way it ended; an Error only when it could not be started (not_found for
// a missing tool, io otherwise).
Result<ProcessResult> run_process(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                                  const std::filesystem::path& log_file, std::chrono::milliseconds timeout);

// Makes SIGINT, SIGTERM and SIGHUP first kill (SIGKILL) the process group of
// every tool run_process() is running, then end this process with the same
// signal. Tools run in their own process groups, so without this a Ctrl-C on
// `kcache plan build` would leave them running. Call once, from main code.
void kill_children_on_termination_signals();

// Returns the last `max_bytes` of a log file (for error messages).
std::string read_log_tail(const std::filesystem::path& log_file, std::size_t max_bytes = 4096);

}  // namespace kcache::plan
