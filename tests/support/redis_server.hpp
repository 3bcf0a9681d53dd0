// tests/support/redis_server.hpp: a real redis-server for tests, on 127.0.0.1
// and a free port (plus a Unix socket), in the test's own directory.
//
// The server dies with the test process (PR_SET_PDEATHSIG) and is SIGKILLed
// by the destructor, so it is stopped even when a test fails.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kcache::test {

// Returns a TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

class RedisServer {
 public:
  // Starts redis-server in `dir` with `extra` arguments and waits until it
  // answers PING (up to 10 s). Returns null (and a reason in `why`) when it
  // cannot start.
  static std::unique_ptr<RedisServer> start(const std::filesystem::path& dir, std::string* why = nullptr,
                                            std::vector<std::string> extra = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return m_port; }
  std::string url() const;        // redis://127.0.0.1:<port>
  std::string unix_url() const;   // redis+unix://<dir>/redis.sock
  pid_t pid() const noexcept { return m_pid; }

  void kill();      // SIGKILL and reap
  bool restart();   // kill() if running, then start again on the same port
  void pause();     // SIGSTOP
  void resume();    // SIGCONT

  // Runs redis-cli against the server; returns its stdout (trimmed).
  std::string cli(const std::vector<std::string>& args) const;

 private:
  RedisServer() = default;
  bool launch(std::string* why);

  std::filesystem::path m_dir;
  std::vector<std::string> m_extra;
  int m_port = 0;
  pid_t m_pid = -1;
};

}  // namespace kcache::test
