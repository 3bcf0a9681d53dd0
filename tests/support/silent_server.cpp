#include "support/silent_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kcache::test {

std::unique_ptr<SilentServer> SilentServer::start(std::string* why) {
  std::unique_ptr<SilentServer> s(new SilentServer());
  s->m_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (s->m_listen < 0 || ::bind(s->m_listen, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(s->m_listen, 512) != 0 || ::getsockname(s->m_listen, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(s->m_wake, O_CLOEXEC) != 0) {
    if (why != nullptr) {
      *why = std::string("silent server: ") + std::strerror(errno);
    }
    return nullptr;
  }
  s->m_port = ntohs(addr.sin_port);
  s->m_thread = std::thread([p = s.get()] { p->serve(); });
  return s;
}

SilentServer::~SilentServer() {
  if (m_wake[1] >= 0) {
    ::close(m_wake[1]);
  }
  if (m_thread.joinable()) {
    m_thread.join();
  }
  if (m_wake[0] >= 0) {
    ::close(m_wake[0]);
  }
  if (m_listen >= 0) {
    ::close(m_listen);
  }
}

std::string SilentServer::url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }

void SilentServer::serve() {
  std::vector<pollfd> fds{{m_wake[0], POLLIN, 0}, {m_listen, POLLIN, 0}};
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    if (fds[0].revents != 0) {
      break;  // the destructor closed the pipe
    }
    if ((fds[1].revents & POLLIN) != 0) {
      const int c = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        ++m_accepted;
        fds.push_back({c, POLLIN, 0});
      }
    }
    // Read and drop what clients send; forget the ones that hung up.
    for (std::size_t i = 2; i < fds.size();) {
      if (fds[i].revents != 0) {
        char buf[4096];
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ::close(fds[i].fd);
          fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
      }
      ++i;
    }
  }
  for (std::size_t i = 2; i < fds.size(); ++i) {
    ::close(fds[i].fd);
  }
}

}  // namespace kcache::test
