// tests/support/silent_server.hpp: a TCP server on 127.0.0.1 that accepts
// every connection and never answers (a hung remote, as a server that is
// stopped or wedged behind a load balancer looks to a client): connects
// succeed, requests are read and dropped, no byte is ever sent back.
//
// Thread-safety: one thread accepts and drains; the object is not otherwise shared.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kcache::test {

class SilentServer {
 public:
  // Listens on a free port. Null (and a reason in `why`) when it cannot.
  static std::unique_ptr<SilentServer> start(std::string* why = nullptr);
  // Closes every connection and the listening socket.
  ~SilentServer();
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;

  int port() const noexcept { return m_port; }
  std::string url() const;  // redis://127.0.0.1:<port>
  // Connections accepted so far.
  int accepted() const noexcept { return m_accepted.load(); }

 private:
  SilentServer() = default;
  void serve();

  int m_listen = -1;
  int m_wake[2] = {-1, -1};  // a pipe: closing it stops serve()
  int m_port = 0;
  std::atomic<int> m_accepted{0};
  std::thread m_thread;
};

}  // namespace kcache::test
