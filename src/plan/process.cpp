// Running builder tools with posix_spawn and a timeout (see plan/process.hpp).
#include "plan/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/fd.hpp"
#include "util/tied_child.hpp"

extern char** environ;

namespace kcache::plan {

namespace {

// Process groups of the tools running now, for the signal handler. Slots hold
// 0 when free; the handler only reads them and calls kill() (async-signal-safe).
constexpr std::size_t k_child_slots = 256;
std::atomic<pid_t> g_children[k_child_slots];

std::size_t register_child(pid_t pid) {
  for (std::size_t i = 0; i < k_child_slots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) {
      return i;
    }
  }
  return k_child_slots;  // full: this child is not killed on a signal (still bounded by its timeout)
}

void unregister_child(std::size_t slot) {
  if (slot < k_child_slots) {
    g_children[slot].store(0);
  }
}

extern "C" void kill_children_and_exit(int sig) {
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void kill_children_on_termination_signals() {
  struct sigaction action {};
  action.sa_handler = kill_children_and_exit;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    ::sigaction(sig, &action, nullptr);
  }
}

std::string ProcessResult::describe(std::chrono::seconds timeout) const {
  if (timed_out) {
    return "timed out after " + std::to_string(timeout.count()) + " s (killed)";
  }
  if (signal != 0) {
    return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  }
  return "exited with status " + std::to_string(exit_code);
}

namespace {

// The guardian's answer to its parent's death (SIGTERM, asked for with
// PR_SET_PDEATHSIG) and to the termination signals: kill its whole process
// group (whose id is the guardian's pid): the tool and everything the tool
// started, and the guardian itself while it is still in that group.
extern "C" void kill_own_group(int) { ::kill(-::getpid(), SIGKILL); }

// Writes errno to `fd` and ends the process. Async-signal-safe.
[[noreturn]] void fail_with_errno(int fd, int err) {
  (void)!::write(fd, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

// How a tool runs (async-signal-safe code only after fork; the parent is
// multi-threaded):
//
//   kcache ── guardian G (own process group, parent-death signal SIGTERM)
//               └── tool T (same group, parent-death signal SIGKILL) ── the tool's children
//
// G exists so that the tool's own children die with kcache too: when kcache
// dies, however it dies, the kernel sends G its parent-death signal and G
// kills the whole group. When T ends, G moves itself out of the group, kills
// what T left behind in it, reports T's wait status on a pipe and exits.
// On timeout or cancel, kcache kills the group. The calling thread waits for G,
// so the thread that forked it outlives it (parent-death signals follow the
// forking thread).
Result<ProcessResult> run_process(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                                  const std::filesystem::path& log_file, std::chrono::milliseconds timeout) {
  if (argv.empty()) {
    return make_error(ErrorCode::invalid_argument, "empty command");
  }
  auto program = util::find_program(argv[0]);
  if (!program) {
    return make_error(ErrorCode::not_found, "cannot run '" + argv[0] + "': not found (install it or put it on PATH)");
  }
  const std::string exe = program->string();
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  util::Fd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  util::Fd log_fd(::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!null_fd || !log_fd) {
    return make_errno_error(errno, "cannot run '" + argv[0] + "': cannot open its log " + log_file.string());
  }
  int exec_pipe[2];
  int status_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return make_errno_error(errno, "cannot run '" + argv[0] + "': pipe");
  }
  util::Fd exec_read(exec_pipe[0]);
  util::Fd exec_write(exec_pipe[1]);
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    return make_errno_error(errno, "cannot run '" + argv[0] + "': pipe");
  }
  util::Fd status_read(status_pipe[0]);
  util::Fd status_write(status_pipe[1]);
  const pid_t kcache_pid = ::getpid();
  const pid_t kcache_group = ::getpgrp();
  const char* dir = cwd.c_str();

  const pid_t pid = ::fork();
  if (pid < 0) {
    return make_errno_error(errno, "cannot run '" + argv[0] + "': fork");
  }
  if (pid == 0) {
    // The guardian.
    ::setpgid(0, 0);
    struct sigaction die {};
    die.sa_handler = kill_own_group;
    sigemptyset(&die.sa_mask);
    for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
      ::sigaction(sig, &die, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != kcache_pid) {
      kill_own_group(0);
    }
    const pid_t guardian = ::getpid();
    const pid_t tool = ::fork();
    if (tool < 0) {
      fail_with_errno(exec_write.get(), errno);
    }
    if (tool == 0) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != guardian) {
        ::_exit(127);
      }
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) {
          ::signal(sig, SIG_DFL);
        }
      }
      if (::dup2(null_fd.get(), 0) < 0 || ::dup2(log_fd.get(), 1) < 0 || ::dup2(log_fd.get(), 2) < 0) {
        fail_with_errno(exec_write.get(), errno);
      }
      if (::chdir(dir) != 0) {
        fail_with_errno(exec_write.get(), errno);
      }
      ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
      ::execve(exe.c_str(), args.data(), environ);
      fail_with_errno(exec_write.get(), errno);
    }
    // Keep only the status pipe: the tool's exec error reaches kcache directly,
    // and descriptors kcache owns are not held open by the guardian.
    const int keep = status_write.get();
    if (keep > 3) {
      ::syscall(SYS_close_range, 3U, static_cast<unsigned>(keep - 1), 0U);
    }
    ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0U, 0U);
    int status = 0;
    while (::waitpid(tool, &status, 0) < 0) {
      if (errno != EINTR) {
        ::_exit(126);
      }
    }
    // Leave the group (back to kcache's), then kill what the tool left in it.
    if (::setpgid(0, kcache_group) == 0) {
      ::kill(-guardian, SIGKILL);
    }
    (void)!::write(keep, &status, sizeof status);
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // also done by the guardian; whichever runs first
  exec_write.reset();
  status_write.reset();

  const std::size_t slot = register_child(pid);
  struct Unregister {
    std::size_t slot;
    ~Unregister() { unregister_child(slot); }
  } unregister{slot};
  int exec_errno = 0;
  ssize_t n = -1;
  do {
    n = ::read(exec_read.get(), &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (exec_errno == ENOENT) {
      return make_error(ErrorCode::not_found, "cannot run '" + argv[0] + "': not found (install it or put it on PATH)");
    }
    return make_errno_error(exec_errno, "cannot run '" + argv[0] + "'");
  }

  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(200);
  int status = 0;
  while (true) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      break;
    }
    if (w < 0 && errno != EINTR) {
      return make_errno_error(errno, "waitpid");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      result.timed_out = true;
      return result;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(20000));
  }
  // The tool's status, as the guardian reported it; without a report the
  // guardian itself was killed (by a signal meant for the group).
  int tool_status = 0;
  do {
    n = ::read(status_read.get(), &tool_status, sizeof tool_status);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof tool_status)) {
    status = tool_status;
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

std::string read_log_tail(const std::filesystem::path& log_file, std::size_t max_bytes) {
  std::ifstream in(log_file, std::ios::binary | std::ios::ate);
  if (!in) {
    return {};
  }
  const auto size = static_cast<std::size_t>(in.tellg());
  const std::size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string text(size - start, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  return text;
}

}  // namespace kcache::plan
