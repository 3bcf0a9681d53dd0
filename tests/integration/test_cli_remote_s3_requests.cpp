// What kcache sends to an S3 store, checked on the wire or on the server:
// the ttl_s tag on each object (read back with GET ?tagging from a real
// SeaweedFS), virtual-hosted addressing (BUCKET.localhost against SeaweedFS
// with -s3.domainName), and AWS_SESSION_TOKEN sent as a signed
// x-amz-security-token header (SeaweedFS validates no STS tokens, so a small
// purpose-built server records the request instead).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "integration/cli_shell.hpp"
#include "store/remote/remote_spec.hpp"
#include "store/remote/s3_backend.hpp"
#include "support/seaweedfs_server.hpp"

namespace kcache::test {
namespace {

bool required() {
  const char* v = std::getenv("KCACHE_REQUIRE_TOOLKIT");
  return v != nullptr && std::string(v) == "1";
}

class S3Requests : public CliShell {
 protected:
  void SetUp() override {
    CliShell::SetUp();
    m_server = SeaweedfsServer::start(root() / "weed", &m_why);
    if (m_server == nullptr) {
      if (required()) {
        FAIL() << "KCACHE_REQUIRE_TOOLKIT=1 but SeaweedFS cannot run: " << m_why;
      }
      GTEST_SKIP() << "no SeaweedFS: " << m_why;
    }
  }
  void TearDown() override { m_server.reset(); }

  std::unique_ptr<SeaweedfsServer> m_server;
  std::string m_why;
};

TEST_F(S3Requests, TtlBecomesATagOnEveryObjectAndLifecycleRulesCanMatchIt) {
  const std::string key = put("blob", "an entry with a lifetime");
  const std::string remote = "KCACHE_REMOTE='" + m_server->url("ttl") + "&ttl_s=86400' ";
  const ShellRun push = sh(SeaweedfsServer::env() + remote + "\"$K\" push " + key);
  ASSERT_EQ(push.rc, 0) << push.out << push.err;
  // The object's tags, as the store keeps them (a signed GET ?tagging).
  const std::string object = m_server->endpoint() + "/" + SeaweedfsServer::k_bucket + "/ttl/kcache/v1/" + key;
  const ShellRun tags = sh(std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user ") +
                           SeaweedfsServer::k_access_key + ":" + SeaweedfsServer::k_secret_key + " '" + object +
                           "?tagging='");
  ASSERT_EQ(tags.rc, 0) << tags.err;
  EXPECT_NE(tags.out.find("<Key>kcache-ttl-s</Key><Value>86400</Value>"), std::string::npos) << tags.out;
  // Without ttl_s: no tag.
  const std::string other = put("other", "an entry without one");
  ASSERT_EQ(sh(SeaweedfsServer::env() + "KCACHE_REMOTE='" + m_server->url("ttl") + "' \"$K\" push " + other).rc, 0);
  const ShellRun none = sh(std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 --user ") +
                           SeaweedfsServer::k_access_key + ":" + SeaweedfsServer::k_secret_key + " '" +
                           m_server->endpoint() + "/" + SeaweedfsServer::k_bucket + "/ttl/kcache/v1/" + other +
                           "?tagging='");
  EXPECT_EQ(none.out.find("kcache-ttl-s"), std::string::npos) << none.out;
}

TEST_F(S3Requests, VirtualHostedAddressingPutsTheBucketInTheHostName) {
  const std::string key = put("blob", "through BUCKET.localhost");
  const std::string url = "s3://" + std::string(SeaweedfsServer::k_bucket) + "/vh?endpoint=" +
                          m_server->virtual_endpoint() + "&addressing=virtual";
  const ShellRun ping = sh(SeaweedfsServer::env() + "KCACHE_REMOTE='" + url + "' \"$K\" remote ping");
  ASSERT_EQ(ping.rc, 0) << ping.out << ping.err;
  ASSERT_EQ(sh(SeaweedfsServer::env() + "KCACHE_REMOTE='" + url + "' \"$K\" push " + key).rc, 0);
  // The object is where path-style addressing finds it too: one bucket, two ways to name it.
  const ShellRun pull = sh("KCACHE_DIR='" + (root() / "b").string() + "' " + SeaweedfsServer::env() +
                           "KCACHE_REMOTE='" + m_server->url("vh") + "' \"$K\" pull " + key + " && KCACHE_DIR='" +
                           (root() / "b").string() + "' \"$K\" get " + key + " -o got");
  ASSERT_EQ(pull.rc, 0) << pull.out << pull.err;
  EXPECT_EQ(read_file(dir() / "got"), "through BUCKET.localhost");
  // A bucket name in the host that the server does not hold is named as missing.
  const std::string missing = "s3://kc-nowhere/vh?endpoint=" + m_server->virtual_endpoint() + "&addressing=virtual";
  const ShellRun absent = sh(SeaweedfsServer::env() + "KCACHE_REMOTE='" + missing + "' \"$K\" remote ping");
  EXPECT_EQ(absent.rc, 1) << absent.out << absent.err;
  EXPECT_NE(absent.err.find("does not exist"), std::string::npos) << absent.err;
}

// Accepts one connection on 127.0.0.1, keeps the request's head and answers
// 404 NoSuchKey (a miss).
class RecordingServer {
 public:
  RecordingServer() {
    m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(m_fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(m_fd, 1) != 0 ||
        ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    m_port = ntohs(a.sin_port);
    m_thread = std::thread([this] {
      const int c = ::accept(m_fd, nullptr, nullptr);
      if (c < 0) {
        return;
      }
      char buf[4096];
      while (m_request.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) {
          break;
        }
        m_request.append(buf, static_cast<std::size_t>(n));
      }
      const std::string body = "<Error><Code>NoSuchKey</Code></Error>";
      const std::string reply = "HTTP/1.1 404 Not Found\r\nContent-Length: " + std::to_string(body.size()) +
                                "\r\nConnection: close\r\n\r\n" + body;
      (void)!::write(c, reply.data(), reply.size());
      ::close(c);
    });
  }
  ~RecordingServer() {
    if (m_thread.joinable()) {
      ::shutdown(m_fd, SHUT_RDWR);
      m_thread.join();
    }
    ::close(m_fd);
  }
  RecordingServer(const RecordingServer&) = delete;
  RecordingServer& operator=(const RecordingServer&) = delete;
  int port() const noexcept { return m_port; }
  // The request's head, once the connection was served (joins the thread).
  std::string request() {
    if (m_thread.joinable()) {
      m_thread.join();
    }
    return m_request;
  }

 private:
  int m_fd = -1;
  int m_port = 0;
  std::thread m_thread;
  std::string m_request;
};

// The value of header `name` (lower case) in the request head `head`.
std::string header(const std::string& head, const std::string& name) {
  std::string lower = head;
  for (char& c : lower) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const auto at = lower.find("\r\n" + name + ":");
  if (at == std::string::npos) {
    return {};
  }
  const auto start = head.find_first_not_of(' ', at + 3 + name.size());
  return head.substr(start, head.find("\r\n", start) - start);
}

TEST(S3SessionToken, TheTokenIsSentAsASignedHeaderAndNeverPrinted) {
  RecordingServer server;
  ASSERT_GT(server.port(), 0);
  ::setenv("AWS_ACCESS_KEY_ID", "ASIATEMPORARYKEY", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "temporary-secret", 1);
  ::setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEXAMPLETOKEN", 1);
  auto spec = remote::parse_remote_url("s3://kc-team/p?endpoint=http://127.0.0.1:" + std::to_string(server.port()) +
                                       "&timeout_ms=5000");
  ASSERT_TRUE(spec);
  remote::S3Backend backend(*spec);
  auto got = backend.get("kcache:v1:" + std::string(64, 'a'), 1024);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("AWS_SESSION_TOKEN");
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_FALSE(got->has_value()) << "404 NoSuchKey is a miss";
  const std::string head = server.request();
  EXPECT_EQ(head.rfind("GET /kc-team/p/kcache/v1/" + std::string(64, 'a') + " HTTP/1.1\r\n", 0), 0U) << head;
  EXPECT_EQ(header(head, "x-amz-security-token"), "FwoGZXIvYXdzEXAMPLETOKEN") << head;
  const std::string auth = header(head, "authorization");
  EXPECT_EQ(auth.rfind("AWS4-HMAC-SHA256 Credential=ASIATEMPORARYKEY/", 0), 0U) << auth;
  const auto signed_at = auth.find("SignedHeaders=");
  ASSERT_NE(signed_at, std::string::npos) << auth;
  const std::string signed_headers = auth.substr(signed_at, auth.find(',', signed_at) - signed_at);
  EXPECT_NE(signed_headers.find("x-amz-security-token"), std::string::npos) << "the token is signed: " << auth;
  EXPECT_EQ(head.find("temporary-secret"), std::string::npos) << "never the secret";
}

}  // namespace
}  // namespace kcache::test
