#include "support/child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

namespace kcache::test {

pid_t fork_child(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 120;
    try {
      rc = fn();
    } catch (...) {
      rc = 121;
    }
    ::_exit(rc);
  }
  return pid;
}

ChildReport run_reporting_child(const std::function<void(int fd)>& fn) {
  ChildReport report;
  int p[2];
  if (::pipe(p) != 0) {
    return report;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    fn(p[1]);
    ::_exit(127);  // fn must _exit itself
  }
  ::close(p[1]);
  if (pid < 0) {
    ::close(p[0]);
    return report;
  }
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) {
      report.output.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(p[0]);
  report.status = wait_child(pid);
  return report;
}

int wait_child(pid_t pid) {
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, 0) == pid) {
      return status;
    }
    if (errno != EINTR) {
      return -1;
    }
  }
}

pid_t spawn_server(std::vector<std::string> argv, const std::string& log, int death_signal) {
  std::vector<char*> args;
  for (auto& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, death_signal);
    if (::getppid() != parent) {
      ::_exit(126);
    }
    if (!log.empty()) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void kill_child(pid_t& pid) {
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    wait_child(pid);
    pid = -1;
  }
}

void signal_child(pid_t pid, int signo) {
  if (pid > 0) {
    ::kill(pid, signo);
  }
}

int run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env,
                std::string* out) {
  int fds[2] = {-1, -1};
  if (out != nullptr && ::pipe(fds) != 0) {
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (out != nullptr) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
    }
    for (const auto& [k, v] : extra_env) {
      ::setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (out != nullptr) {
    ::close(fds[1]);
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n > 0) {
        out->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    ::close(fds[0]);
  }
  return pid < 0 ? -1 : wait_child(pid);
}

std::string describe_status(int status) {
  if (status == -1) {
    return "no status";
  }
  if (WIFEXITED(status)) {
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

std::uint64_t peak_rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stoull(line.substr(6)) * 1024;
    }
  }
  return 0;
}

}  // namespace kcache::test
