// tests/support/child.hpp: child processes for multi-process and fault tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kcache::test {

// Forks; the child runs `fn` and _exits with its return value (never returns
// into the test framework). Returns the child's pid, or -1.
pid_t fork_child(const std::function<int()>& fn);

// Waits for `pid`. Returns the raw wait status, or -1.
int wait_child(pid_t pid);

// For the servers tests start (redis, nginx, SeaweedFS): forks and execs
// `argv` (argv[0]: a path, or a name looked up in PATH), with `death_signal`
// sent to it when this process dies (PR_SET_PDEATHSIG; it exits at once if
// this process died before that was set), its stdout and stderr appended to
// `log` when one is named. Returns the child's pid, or -1.
pid_t spawn_server(std::vector<std::string> argv, const std::string& log = {}, int death_signal = 9 /* SIGKILL */);

// For the servers tests start (redis, nginx, SeaweedFS): SIGKILLs and reaps
// the child `pid` names, then sets it to -1; nothing when it is not positive.
void kill_child(pid_t& pid);

// Sends `signo` to the child `pid` (SIGSTOP: a hung server; SIGCONT);
// nothing when `pid` is not positive.
void signal_child(pid_t pid, int signo);

// Runs `argv` (argv[0] is a path) with `extra_env` added to the environment,
// waits, and returns the raw wait status; `out` receives stdout+stderr.
int run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env,
                std::string* out = nullptr);

// What run_reporting_child saw: the child's wait status and what it wrote.
struct ChildReport {
  int status = -1;
  std::string output;
};

// Forks; the child runs `fn(fd)`, which writes its report to `fd` and must
// _exit (it never returns into the test framework). Returns once the child
// has exited, with everything it wrote.
ChildReport run_reporting_child(const std::function<void(int fd)>& fn);

// Describes a wait status: "exit 0", "signal 9".
std::string describe_status(int status);

// Peak resident set of this process, in bytes (VmHWM of /proc/self/status); 0
// when it cannot be read.
std::uint64_t peak_rss();

}  // namespace kcache::test
