#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "support/child.hpp"

namespace kcache::test {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return 0;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::unique_ptr<RedisServer> RedisServer::start(const std::filesystem::path& dir, std::string* why,
                                                std::vector<std::string> extra) {
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->m_dir = dir;
  s->m_extra = std::move(extra);
  std::filesystem::create_directories(dir);
  // A free port can be taken by another test before the server binds it, and
  // a cluster node also needs port + 10000 (its bus) to be free and at most
  // 65535: about one ephemeral port in five is too high for that. Try enough
  // ports that a start never fails by chance.
  for (int attempt = 0; attempt < 20; ++attempt) {
    s->m_port = free_port();
    if (s->launch(why)) {
      return s;
    }
  }
  return nullptr;
}

bool RedisServer::launch(std::string* why) {
  const std::string port = std::to_string(m_port);
  std::vector<std::string> args{"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", m_dir.string(), "--unixsocket",
                                (m_dir / "redis.sock").string(), "--unixsocketperm", "700", "--daemonize", "no",
                                "--logfile", (m_dir / "redis.log").string(), "--protected-mode", "no"};
  args.insert(args.end(), m_extra.begin(), m_extra.end());
  const pid_t pid = spawn_server(std::move(args));
  if (pid < 0) {
    if (why != nullptr) {
      *why = "fork failed";
    }
    return false;
  }
  m_pid = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      if (why != nullptr) {
        *why = "redis-server exited at start (" + describe_status(status) +
               "); is it installed (scripts/bootstrap.sh)? log: " + (m_dir / "redis.log").string();
      }
      return false;
    }
    if (cli({"PING"}) == "PONG") {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (why != nullptr) {
    *why = "redis-server did not answer PING within 10 s";
  }
  kill();
  return false;
}

RedisServer::~RedisServer() {
  resume();
  kill();
}

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }

std::string RedisServer::unix_url() const { return "redis+unix://" + (m_dir / "redis.sock").string(); }

void RedisServer::kill() { kill_child(m_pid); }

bool RedisServer::restart() {
  kill();
  std::error_code ec;
  std::filesystem::remove(m_dir / "redis.sock", ec);
  return launch(nullptr);
}

void RedisServer::pause() { signal_child(m_pid, SIGSTOP); }

void RedisServer::resume() { signal_child(m_pid, SIGCONT); }

std::string RedisServer::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv{"/usr/bin/redis-cli", "-h", "127.0.0.1", "-p", std::to_string(m_port)};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  run_program(argv, {}, &out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) {
    out.pop_back();
  }
  return out;
}

}  // namespace kcache::test
