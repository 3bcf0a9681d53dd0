// An HTTP (WebDAV) remote served by nginx set up exactly as
// docs/remote-format.md says: the `install -d` command and the `server` block
// are taken from the page, nginx is started as root (its workers then run as
// www-data, as under a normal start), and real `kcache` processes put, get,
// ping, list and remove through it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "integration/cli_shell.hpp"
#include "support/child.hpp"
#include "support/nginx_server.hpp"
#include "support/redis_server.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

const fs::path k_doc = fs::path(KCACHE_SOURCE_DIR) / "docs" / "remote-format.md";

// The documented setup: the fenced block after the snippet marker, and the
// `install -d` line above it.
struct DocumentedNginx {
  std::string server_block;
  std::string install_command;
};

DocumentedNginx read_documented_nginx() {
  const std::string doc = read_file(k_doc);
  DocumentedNginx d;
  const auto marker = doc.find("<!-- nginx-webdav-snippet");
  if (marker == std::string::npos) {
    return d;
  }
  const auto open = doc.find("```nginx\n", marker);
  const auto close = doc.find("\n```", open + 9);
  if (open == std::string::npos || close == std::string::npos) {
    return d;
  }
  d.server_block = doc.substr(open + 9, close - open - 9);
  const auto install = doc.rfind("install -d ", marker);
  if (install != std::string::npos) {
    d.install_command = doc.substr(install, doc.find('\n', install) - install);
  }
  return d;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// nginx started as root with the documented server block (paths under
// `dir` instead of /srv/kcache, the port a free one); stopped with SIGQUIT
// (the master stops its workers), and SIGTERMed if the test process dies.
class DocumentedNginxServer {
 public:
  static std::unique_ptr<DocumentedNginxServer> start(const fs::path& dir, const DocumentedNginx& doc,
                                                      std::string* why) {
    std::unique_ptr<DocumentedNginxServer> s(new DocumentedNginxServer());
    s->m_port = free_port();
    const std::string base = dir.string();
    std::string block = replace_all(doc.server_block, "/srv/kcache", base + "/srv");
    block = std::regex_replace(block, std::regex("listen 8080;"), "listen 127.0.0.1:" + std::to_string(s->m_port) + ";");
    const std::string install = replace_all(doc.install_command, "/srv/kcache", base + "/srv");
    if (std::system(install.c_str()) != 0) {
      *why = "the documented command failed: " + install;
      return nullptr;
    }
    {
      std::ofstream conf(dir / "nginx.conf");
      conf << "user www-data;\ndaemon off;\npid " << base << "/nginx.pid;\nerror_log " << base
           << "/error.log warn;\nevents { worker_connections 64; }\nhttp {\n  access_log off;\n"
           << block << "\n}\n";
    }
    const pid_t pid = spawn_server(
        {"/usr/sbin/nginx", "-e", (dir / "error.log").string(), "-p", base, "-c", (dir / "nginx.conf").string()}, {},
        SIGTERM);
    s->m_pid = pid;
    s->m_error_log = dir / "error.log";
    // Up when the documented location answers (an absent object: 404).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        s->m_pid = -1;
        *why = "nginx exited at start; see " + s->m_error_log.string() + ": " + read_file(s->m_error_log);
        return nullptr;
      }
      const std::string probe = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(s->m_port) + " 2>/dev/null";
      if (std::system(("bash -c '" + probe + "'").c_str()) == 0) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *why = "nginx did not answer; see " + s->m_error_log.string();
    return nullptr;
  }

  ~DocumentedNginxServer() {
    if (m_pid > 0) {
      ::kill(m_pid, SIGQUIT);
      int status = 0;
      ::waitpid(m_pid, &status, 0);
    }
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(m_port); }
  std::string error_log() const { return read_file(m_error_log); }

 private:
  DocumentedNginxServer() = default;
  int m_port = 0;
  pid_t m_pid = -1;
  fs::path m_error_log;
};

class CliRemoteHttp : public CliShell {
 protected:
  void SetUp() override {
    CliShell::SetUp();
    if (!nginx_installed() || ::geteuid() != 0) {
      GTEST_SKIP() << "needs /usr/sbin/nginx and root (nginx's workers must run as another user, as in production)";
    }
    const DocumentedNginx doc = read_documented_nginx();
    ASSERT_FALSE(doc.server_block.empty()) << "no nginx snippet found in " << k_doc;
    ASSERT_NE(doc.install_command.find("www-data"), std::string::npos) << doc.install_command;
    // www-data must be able to reach the directories under the test's own.
    fs::permissions(root(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    std::string why;
    m_nginx = DocumentedNginxServer::start(root(), doc, &why);
    ASSERT_NE(m_nginx, nullptr) << why;
  }

  std::string env(const std::string& url) const {
    return "KCACHE_REMOTE='" + url + "' ";
  }
  std::string cache_url() const { return m_nginx->base_url() + "/cache"; }

  std::unique_ptr<DocumentedNginxServer> m_nginx;
};

TEST_F(CliRemoteHttp, TheDocumentedSnippetServesPutAndGetUnderANormallyStartedNginx) {
  // Workers run as www-data, not root: the setup in the doc is what makes writes work.
  const ShellRun ps = sh("ps -o user= --ppid \"$(cat '" + (root() / "nginx.pid").string() + "')\"");
  EXPECT_NE(ps.out.find("www-data"), std::string::npos) << ps.out;

  const ShellRun ping = sh(env(cache_url()) + "\"$K\" remote ping");
  ASSERT_EQ(ping.rc, 0) << ping.out << ping.err << m_nginx->error_log();
  EXPECT_NE(ping.out.find("write: ok"), std::string::npos) << ping.out;

  write_file(dir() / "blob", "an entry through the documented nginx");
  const ShellRun put = sh(env(cache_url()) + "\"$K\" put blob");
  ASSERT_EQ(put.rc, 0) << put.err;
  const std::string key = put.out.substr(0, 64);
  const ShellRun push = sh(env(cache_url()) + "\"$K\" push " + key);
  ASSERT_EQ(push.rc, 0) << push.out << push.err << m_nginx->error_log();
  EXPECT_TRUE(fs::exists(root() / "srv" / "data" / "cache" / ("kcache:v1:" + key)));

  // Another host gets it through the remote, byte for byte.
  const std::string other = "KCACHE_DIR='" + (root() / "other").string() + "' " + env(cache_url());
  const ShellRun pull = sh(other + "\"$K\" pull " + key);
  ASSERT_EQ(pull.rc, 0) << pull.out << pull.err;
  const ShellRun get = sh(other + "\"$K\" get " + key + " -o got");
  ASSERT_EQ(get.rc, 0) << get.err;
  EXPECT_EQ(read_file(dir() / "got"), "an entry through the documented nginx");

  // rm over HTTP: DELETE; ls: not supported by this backend (exit 2).
  const ShellRun ls = sh(env(cache_url()) + "\"$K\" remote ls");
  EXPECT_EQ(ls.rc, 2) << ls.out << ls.err;
  EXPECT_NE(ls.err.find("listing is not supported by this backend"), std::string::npos) << ls.err;
  const ShellRun ls_json = sh(env(cache_url()) + "\"$K\" remote ls --json");
  EXPECT_EQ(ls_json.rc, 2);
  EXPECT_FALSE(nlohmann::json::parse(ls_json.out).at(0)["supported"].get<bool>());
  EXPECT_EQ(sh(env(cache_url()) + "\"$K\" remote rm " + key).rc, 0);
  EXPECT_FALSE(fs::exists(root() / "srv" / "data" / "cache" / ("kcache:v1:" + key)));
  EXPECT_EQ(sh(env(cache_url()) + "\"$K\" remote rm " + key).rc, 3);
}

TEST_F(CliRemoteHttp, PingFailsOnALocationWithoutWebDavAndOnRefusedCredentials) {
  // Outside the documented location nginx serves files only: PUT is 405.
  const ShellRun nodav = sh(env(m_nginx->base_url() + "/elsewhere") + "\"$K\" remote ping --json");
  EXPECT_EQ(nodav.rc, 1) << nodav.out << nodav.err;
  const auto j = nlohmann::json::parse(nodav.out).at(0);
  EXPECT_EQ(j["read"], "ok");
  EXPECT_EQ(j["write"], "failed");
  EXPECT_NE(j["error"].get<std::string>().find("HTTP 405"), std::string::npos) << j.dump();
  EXPECT_NE(j["hint"].get<std::string>().find("not a writable WebDAV location"), std::string::npos) << j.dump();
  // Read-only there: nothing is written, so nothing fails.
  EXPECT_EQ(sh(env(m_nginx->base_url() + "/elsewhere?read_only=true") + "\"$K\" remote ping").rc, 0);

  // A server that wants a bearer token: 401 without it, exit 1 naming the credentials.
  std::string why;
  auto guarded = NginxServer::start(root() / "guarded", &why, "the-token");
  ASSERT_NE(guarded, nullptr) << why;
  const ShellRun refused = sh(env(guarded->url()) + "\"$K\" remote ping");
  EXPECT_EQ(refused.rc, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("HTTP 401"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("refused the credentials"), std::string::npos) << refused.err;
  const ShellRun wrong =
      sh("TOKEN=wrong " + env(guarded->url() + "?bearer_token_env=TOKEN") + "\"$K\" remote ping");
  EXPECT_EQ(wrong.rc, 1) << wrong.out << wrong.err;
  const ShellRun right =
      sh("TOKEN=the-token " + env(guarded->url() + "?bearer_token_env=TOKEN") + "\"$K\" remote ping");
  EXPECT_EQ(right.rc, 0) << right.out << right.err;
}

// A large entry moves in parts over HTTP too: `kcache push` reads it from its
// file as it sends it, `kcache pull` checks it as it arrives into a file
// staged in the cache; each process's peak RSS stays within 64 MiB of the
// same command's on a missing key (a 96 MiB entry held whole would not).
TEST_F(CliRemoteHttp, ALargeEntryStreamsBothWaysWithBoundedMemory) {
  ASSERT_EQ(sh("head -c 100663296 /dev/urandom > engine.bin").rc, 0);
  const ShellRun put = sh("KCACHE_FSYNC=none \"$K\" put engine.bin");
  ASSERT_EQ(put.rc, 0) << put.err;
  const std::string key = put.out.substr(0, 64);
  const std::string url = cache_url() + "?max_entry_size=200m&timeout_ms=60000";
  const auto [push_rc, push_rss] =
      run_measured(dir(), "KCACHE_DIR='" + cache().string() + "' KCACHE_FSYNC=none " + env(url), "push " + key);
  ASSERT_EQ(push_rc, 0) << read_file(dir() / "measured.err") << m_nginx->error_log();
  const std::string other = "KCACHE_DIR='" + (root() / "other").string() + "' KCACHE_FSYNC=none " + env(url);
  const auto [base_rc, base_rss] = run_measured(dir(), other, "pull " + std::string(64, '0'));
  ASSERT_EQ(base_rc, 3) << read_file(dir() / "measured.err");
  const auto [pull_rc, pull_rss] = run_measured(dir(), other, "pull " + key);
  ASSERT_EQ(pull_rc, 0) << read_file(dir() / "measured.err");
  EXPECT_EQ(sh("KCACHE_DIR='" + (root() / "other").string() + "' \"$K\" get " + key +
               " -o got.bin && cmp -s got.bin engine.bin").rc,
            0);
  EXPECT_LT(push_rss, base_rss + 64 * 1024) << "baseline " << base_rss << " KiB";
  EXPECT_LT(pull_rss, base_rss + 64 * 1024) << "baseline " << base_rss << " KiB";
}

}  // namespace
}  // namespace kcache::test
