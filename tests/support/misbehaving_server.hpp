// tests/support/misbehaving_server.hpp: a small purpose-built TCP server that
// misbehaves on purpose (tests/support/misbehaving_server.py): it never
// answers, trickles its replies at 1 KiB/s, or declares a 1.5 GiB reply, in
// Redis's protocol or HTTP's. On 127.0.0.1 and a free port.
//
// The server dies with the test process (PR_SET_PDEATHSIG) and is SIGKILLed
// by the destructor.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace kcache::test {

class MisbehavingServer {
 public:
  // `mode`: silent, redis-trickle, redis-huge, http-trickle, http-huge,
  // http-chunked (see the script). Returns null (and a reason in `why`)
  // when python3 cannot start it.
  static std::unique_ptr<MisbehavingServer> start(const std::string& mode, std::string* why = nullptr);
  ~MisbehavingServer();
  MisbehavingServer(const MisbehavingServer&) = delete;
  MisbehavingServer& operator=(const MisbehavingServer&) = delete;

  int port() const noexcept { return m_port; }
  std::string redis_url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }
  std::string http_url() const { return "http://127.0.0.1:" + std::to_string(m_port) + "/cache"; }

 private:
  MisbehavingServer() = default;
  pid_t m_pid = -1;
  int m_port = 0;
};

}  // namespace kcache::test
