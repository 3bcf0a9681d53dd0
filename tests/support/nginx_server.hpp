// tests/support/nginx_server.hpp: a real nginx with its WebDAV module (PUT,
// DELETE, create_full_put_path) serving a directory on 127.0.0.1 and a free
// port, for the HTTP remote tier. Stopped (SIGKILL) by the destructor and
// when the test process dies (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

namespace kcache::test {

class NginxServer {
 public:
  // Starts nginx in `dir` (config, logs, data/). With `bearer_token`, every
  // request must carry "Authorization: Bearer <token>" (else 401). Returns
  // null with a reason in `why` when it cannot start (nginx not installed:
  // scripts/bootstrap.sh installs nginx-light).
  static std::unique_ptr<NginxServer> start(const std::filesystem::path& dir, std::string* why = nullptr,
                                            const std::string& bearer_token = {});
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  std::string url() const;  // http://127.0.0.1:<port>/cache
  const std::filesystem::path& data_dir() const noexcept { return m_data; }
  void kill();
  void pause();
  void resume();

 private:
  NginxServer() = default;
  std::filesystem::path m_dir;
  std::filesystem::path m_data;
  int m_port = 0;
  pid_t m_pid = -1;
};

// True when /usr/sbin/nginx exists.
bool nginx_installed();

}  // namespace kcache::test
