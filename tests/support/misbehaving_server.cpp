#include "support/misbehaving_server.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace kcache::test {

std::unique_ptr<MisbehavingServer> MisbehavingServer::start(const std::string& mode, std::string* why) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    if (why != nullptr) {
      *why = "pipe failed";
    }
    return nullptr;
  }
  const std::string script = std::string(KCACHE_TEST_SUPPORT_DIR) + "/misbehaving_server.py";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::execlp("python3", "python3", script.c_str(), mode.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::unique_ptr<MisbehavingServer> s(new MisbehavingServer());
  s->m_pid = pid;
  std::string line;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') {
    line += c;
  }
  ::close(out[0]);
  s->m_port = line.empty() ? 0 : std::stoi(line);
  if (pid < 0 || s->m_port <= 0) {
    if (why != nullptr) {
      *why = "cannot start " + script + " " + mode + " (is python3 installed?)";
    }
    return nullptr;
  }
  return s;
}

MisbehavingServer::~MisbehavingServer() {
  if (m_pid > 0) {
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
  }
}

}  // namespace kcache::test
