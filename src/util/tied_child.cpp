// Child processes that die with their parent (see util/tied_child.hpp).
#include "util/tied_child.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "util/fd.hpp"

extern char** environ;

namespace kcache::util {

namespace {

// One thread per process that forks every tied child, so that the children's
// parent-death signal fires only when the process ends (the kernel sends it
// when the forking thread ends).
class Spawner {
 public:
  Spawner() : m_owner(::getpid()) {
    std::thread([this] { serve(); }).detach();
  }

  pid_t owner() const noexcept { return m_owner; }

  // Runs `fn` on the spawner thread and returns when it is done.
  void run(const std::function<void()>& fn) {
    std::lock_guard<std::mutex> one_at_a_time(m_callers);
    std::unique_lock<std::mutex> lock(m_mutex);
    m_task = &fn;
    m_done = false;
    m_wake.notify_one();
    m_finished.wait(lock, [this] { return m_done; });
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(m_mutex);
    for (;;) {
      m_wake.wait(lock, [this] { return m_task != nullptr; });
      (*m_task)();
      m_task = nullptr;
      m_done = true;
      m_finished.notify_all();
    }
  }

  pid_t m_owner;
  std::mutex m_callers;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_finished;
  const std::function<void()>* m_task = nullptr;
  bool m_done = false;
};

Spawner& spawner() {
  static std::mutex creation;
  static Spawner* current = nullptr;
  std::lock_guard<std::mutex> lock(creation);
  if (current == nullptr || current->owner() != ::getpid()) {
    // A forked copy of this process has no spawner thread: it gets its own.
    // Never deleted: its thread serves until the process exits.
    current = new Spawner();  // NOLINT(cppcoreguidelines-owning-memory)
  }
  return *current;
}

// Writes errno to `fd` and ends the child. Async-signal-safe.
[[noreturn]] void fail_child(int fd, int err) {
  (void)!::write(fd, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

Result<std::filesystem::path> find_program(const std::string& name) {
  if (name.empty()) {
    return make_error(ErrorCode::not_found, "empty program name");
  }
  if (name.find('/') != std::string::npos) {
    return std::filesystem::path(name);
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr && *path_env != '\0' ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return std::filesystem::path(candidate);
    }
    start = end + 1;
  }
  return make_error(ErrorCode::not_found, "'" + name + "' not found on PATH");
}

Result<pid_t> spawn_tied_child(const TiedChildSpec& spec) {
  if (spec.argv.empty()) {
    return make_error(ErrorCode::invalid_argument, "empty command");
  }
  // Everything the child needs is prepared here: between fork and exec it may
  // only make async-signal-safe calls.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  char** env = environ;
  if (spec.env != nullptr) {
    envp.reserve(spec.env->size() + 1);
    for (const auto& e : *spec.env) {
      envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    env = envp.data();
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return make_errno_error(errno, "cannot start " + spec.executable.string() + ": pipe");
  }
  Fd report_read(pipe_fds[0]);
  Fd report_write(pipe_fds[1]);
  const char* exe = spec.executable.c_str();
  const pid_t parent = ::getpid();

  pid_t pid = -1;
  int fork_errno = 0;
  spawner().run([&] {
    pid = ::fork();
    if (pid == 0) {
      // The child: die with the parent; a parent that is already gone is noticed by getppid().
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) {
        ::_exit(127);
      }
      for (const auto& [from, to] : spec.fds) {
        if (from == to) {
          ::fcntl(to, F_SETFD, 0);
        } else if (::dup2(from, to) < 0) {
          fail_child(report_write.get(), errno);
        }
      }
      ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) {
          ::signal(sig, SIG_DFL);
        }
      }
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(exe, argv.data(), env);
      fail_child(report_write.get(), errno);
    }
    fork_errno = errno;
  });
  if (pid < 0) {
    return make_errno_error(fork_errno, "cannot start " + spec.executable.string() + ": fork");
  }
  report_write.reset();
  int child_errno = 0;
  ssize_t n = -1;
  do {
    n = ::read(report_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (child_errno == ENOENT) {
      return make_error(ErrorCode::not_found, "cannot run " + spec.executable.string() + ": not found");
    }
    return make_errno_error(child_errno, "cannot run " + spec.executable.string());
  }
  return pid;
}

}  // namespace kcache::util
