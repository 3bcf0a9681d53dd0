#include "support/nginx_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "support/child.hpp"
#include "support/redis_server.hpp"

namespace kcache::test {

namespace {

bool port_answers(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

bool nginx_installed() { return ::access("/usr/sbin/nginx", X_OK) == 0; }

std::unique_ptr<NginxServer> NginxServer::start(const std::filesystem::path& dir, std::string* why,
                                                const std::string& bearer_token) {
  if (!nginx_installed()) {
    if (why != nullptr) {
      *why = "/usr/sbin/nginx is missing; run scripts/bootstrap.sh (it installs nginx-light)";
    }
    return nullptr;
  }
  std::unique_ptr<NginxServer> s(new NginxServer());
  s->m_dir = dir;
  s->m_data = dir / "data";
  std::filesystem::create_directories(s->m_data / "cache");
  std::filesystem::create_directories(dir / "tmp");
  for (int attempt = 0; attempt < 3; ++attempt) {
    s->m_port = free_port();
    const auto conf = dir / "nginx.conf";
    const std::string d = dir.string();
    {
      std::ofstream out(conf);
      out << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\n"
          << "error_log " << d << "/error.log warn;\nevents { worker_connections 64; }\nhttp {\n"
          << "  access_log off;\n  client_body_temp_path " << d << "/tmp/body;\n  proxy_temp_path " << d
          << "/tmp/proxy;\n  fastcgi_temp_path " << d << "/tmp/fcgi;\n  uwsgi_temp_path " << d
          << "/tmp/uwsgi;\n  scgi_temp_path " << d << "/tmp/scgi;\n  client_max_body_size 512m;\n"
          << "  server {\n    listen 127.0.0.1:" << s->m_port << ";\n    root " << s->m_data.string() << ";\n"
          << "    location / {\n";
      if (!bearer_token.empty()) {
        out << "      if ($http_authorization != \"Bearer " << bearer_token << "\") { return 401; }\n";
      }
      out << "      dav_methods PUT DELETE;\n      create_full_put_path on;\n      dav_access user:rw;\n"
          << "    }\n  }\n}\n";
    }
    const pid_t pid =
        spawn_server({"/usr/sbin/nginx", "-e", (dir / "error.log").string(), "-p", d, "-c", conf.string()});
    s->m_pid = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        s->m_pid = -1;
        break;
      }
      if (port_answers(s->m_port)) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    s->kill();
  }
  if (why != nullptr) {
    *why = "nginx did not start; see " + (dir / "error.log").string();
  }
  return nullptr;
}

NginxServer::~NginxServer() {
  resume();
  kill();
}

std::string NginxServer::url() const { return "http://127.0.0.1:" + std::to_string(m_port) + "/cache"; }

void NginxServer::kill() { kill_child(m_pid); }

void NginxServer::pause() { signal_child(m_pid, SIGSTOP); }

void NginxServer::resume() { signal_child(m_pid, SIGCONT); }

}  // namespace kcache::test
