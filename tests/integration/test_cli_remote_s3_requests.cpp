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

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

// A reply with `status` (e.g. "200 OK") and `body`, the connection closed after it.
std::string http_reply(const std::string& status, const std::string& body, const std::string& headers = "") {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + headers +
         "Connection: close\r\n\r\n" + body;
}

// Serves one connection per reply of `replies` on 127.0.0.1, in order: reads
// the request (its head, then a body of Content-Length bytes), keeps the
// heads, sends the reply and closes. By default one 404 NoSuchKey (a miss).
class RecordingServer {
 public:
  explicit RecordingServer(std::vector<std::string> replies = {
                               http_reply("404 Not Found", "<Error><Code>NoSuchKey</Code></Error>")}) {
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
    m_thread = std::thread([this, replies = std::move(replies)] {
      for (const auto& reply : replies) {
        const int c = ::accept(m_fd, nullptr, nullptr);
        if (c < 0) {
          return;
        }
        std::string request;
        char buf[4096];
        std::size_t want = std::string::npos;  // the whole request's size, once the head is in
        while (want == std::string::npos || request.size() < want) {
          const ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) {
            break;
          }
          request.append(buf, static_cast<std::size_t>(n));
          if (const auto end = request.find("\r\n\r\n"); want == std::string::npos && end != std::string::npos) {
            const std::string head = request.substr(0, end + 2);
            const std::string length = header(head, "content-length");
            want = end + 4 + (length.empty() ? 0 : std::stoul(length));
            if (header(head, "expect") == "100-continue") {  // libcurl's, on signed uploads
              const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
              (void)!::write(c, go_on.data(), go_on.size());
            }
          }
        }
        m_requests.push_back(request.substr(0, request.find("\r\n\r\n") + 2));
        (void)!::write(c, reply.data(), reply.size());
        ::close(c);
      }
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
  // The heads of the requests served. Call it once the client is done: every
  // request it made has been answered, so the server stops accepting (a reply
  // never asked for is not waited for) and its thread is joined.
  std::vector<std::string> requests() {
    if (m_thread.joinable()) {
      ::shutdown(m_fd, SHUT_RDWR);
      m_thread.join();
    }
    return m_requests;
  }
  // The first request's head.
  std::string request() { return requests().at(0); }

 private:
  int m_fd = -1;
  int m_port = 0;
  std::thread m_thread;
  std::vector<std::string> m_requests;
};

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


// A server that checks If-None-Match and writes in two steps can answer 200 to
// two hosts racing for one lease; the object then holds the last writer's
// token. A host owns the lease only when the object it reads back is its own.
TEST(S3LeaseTake, AWriteAnsweredButOverwrittenByAnotherHostIsNotOwnership) {
  const std::string name = "kcache:lease:" + std::string(64, 'b');
  const auto lease_body = [](const std::string& token) {
    return "kcache-lease 1\n" + token + "\n" + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count() + 60000) + "\n30000\n";
  };
  for (const bool overwritten : {true, false}) {
    RecordingServer server({http_reply("200 OK", "", "ETag: \"1\"\r\n"),
                            http_reply("200 OK", lease_body(overwritten ? "another-host" : "this-host"),
                                       "ETag: \"2\"\r\n")});
    ASSERT_GT(server.port(), 0);
    ::setenv("AWS_ACCESS_KEY_ID", "AKEY", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
    auto spec = remote::parse_remote_url("s3://kc-team/p?endpoint=http://127.0.0.1:" +
                                         std::to_string(server.port()) + "&timeout_ms=5000");
    ASSERT_TRUE(spec);
    remote::S3Backend backend(*spec);
    auto taken = backend.lease_take(name, "this-host", 30000);
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    ASSERT_TRUE(taken) << taken.error().message;
    EXPECT_EQ(*taken, !overwritten) << (overwritten ? "the object holds another host's token" : "its own token");
    const auto heads = server.requests();
    ASSERT_EQ(heads.size(), 2U);
    EXPECT_EQ(heads[0].rfind("PUT ", 0), 0U) << heads[0];
    EXPECT_EQ(header(heads[0], "if-none-match"), "*") << heads[0];
    EXPECT_EQ(heads[1].rfind("GET ", 0), 0U) << heads[1];
  }
}

// What an S3 answer that is not the object says to the user: a redirect to
// another host is named as such (kcache follows none), a wrong region still
// asks for ?region=, a refusal for a skewed clock is told apart from refused
// credentials by the answer's Date, and a server that ignores Range still
// gives the prefix asked for.
class S3Answers : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "secret-example", 1);
  }
  void TearDown() override {
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
  }
  // The error of a GET answered with `reply`.
  static Error get_error(const std::string& reply) {
    RecordingServer server({reply});
    auto spec = remote::parse_remote_url("s3://kc-team/p?endpoint=http://127.0.0.1:" + std::to_string(server.port()) +
                                         "&timeout_ms=5000");
    EXPECT_TRUE(spec);
    remote::S3Backend backend(*spec);
    auto got = backend.get("kcache:v1:" + std::string(64, 'a'), 1024);
    EXPECT_FALSE(got.has_value());
    return got ? Error{} : got.error();
  }
  static std::string http_date(std::time_t t) {
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    return buf;
  }
};

TEST_F(S3Answers, ARedirectToAnotherHostIsNamedNotBlamedOnTheRegion) {
  const Error e = get_error(http_reply("307 Temporary Redirect", "", "Location: http://cache.internal:9000/kc-team/p\r\n"));
  EXPECT_NE(e.message.find("the server redirects to http://cache.internal:9000/kc-team/p"), std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("kcache follows no redirect"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("?region="), std::string::npos) << e.message;
}

TEST_F(S3Answers, AnotherRegionStillAsksForTheRegion) {
  const Error e = get_error(http_reply(
      "301 Moved Permanently",
      "<Error><Code>PermanentRedirect</Code><Message>use the right endpoint</Message><Region>eu-west-1</Region>"
      "<Endpoint>kc-team.s3.eu-west-1.amazonaws.com</Endpoint></Error>"));
  EXPECT_NE(e.message.find("the bucket is in another region (eu-west-1): set ?region= on the URL"), std::string::npos)
      << e.message;
}

TEST_F(S3Answers, ASkewedClockIsNotBlamedOnTheCredentials) {
  const std::string date = http_date(std::time(nullptr) + 3600);
  const Error skewed = get_error(http_reply(
      "403 Forbidden",
      "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and the current time "
      "is too large.</Message></Error>",
      "Date: " + date + "\r\n"));
  EXPECT_EQ(skewed.code, ErrorCode::io) << skewed.message;
  EXPECT_NE(skewed.message.find("this host's clock is"), std::string::npos) << skewed.message;
  EXPECT_NE(skewed.message.find("behind the server's (its Date: " + date + ")"), std::string::npos) << skewed.message;
  EXPECT_NE(skewed.message.find("it is not the credentials"), std::string::npos) << skewed.message;
  // A bare 403 with the server's clock an hour off: the same.
  const Error bare = get_error(http_reply("403 Forbidden", "", "Date: " + date + "\r\n"));
  EXPECT_EQ(bare.code, ErrorCode::io) << bare.message;
  EXPECT_NE(bare.message.find("(NTP)"), std::string::npos) << bare.message;
  // With the clocks in step, a 403 is the credentials'.
  const Error refused =
      get_error(http_reply("403 Forbidden", "<Error><Code>AccessDenied</Code></Error>",
                           "Date: " + http_date(std::time(nullptr)) + "\r\n"));
  EXPECT_EQ(refused.code, ErrorCode::permission_denied) << refused.message;
  EXPECT_NE(refused.message.find("the credentials used"), std::string::npos) << refused.message;
}

TEST_F(S3Answers, APrefixFromAServerThatIgnoresRangeIsCutNotRefused) {
  RecordingServer server({http_reply("200 OK", std::string(1000, 'h'))});
  auto spec = remote::parse_remote_url("s3://kc-team/p?endpoint=http://127.0.0.1:" + std::to_string(server.port()) +
                                       "&timeout_ms=5000");
  ASSERT_TRUE(spec);
  remote::S3Backend backend(*spec);
  auto got = backend.get_prefix("kcache:v1:" + std::string(64, 'a'), 80);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, std::string(80, 'h'));
  EXPECT_NE(server.request().find("Range: bytes=0-79"), std::string::npos) << server.request();
}

}  // namespace
}  // namespace kcache::test
