// Running builder tools with posix_spawn and a timeout (see plan/process.hpp).
#include "plan/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

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

Result<ProcessResult> run_process(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                                  const std::filesystem::path& log_file, std::chrono::milliseconds timeout) {
  if (argv.empty()) {
    return make_error(ErrorCode::invalid_argument, "empty command");
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    if (rc == ENOENT) {
      return make_error(ErrorCode::not_found, "cannot run '" + argv[0] + "': not found (install it or put it on PATH)");
    }
    return make_errno_error(rc, "cannot run '" + argv[0] + "'");
  }

  const std::size_t slot = register_child(pid);
  struct Unregister {
    std::size_t slot;
    ~Unregister() { unregister_child(slot); }
  } unregister{slot};
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
