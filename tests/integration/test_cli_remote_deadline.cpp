// Issue 18 end to end. Item 1: `kcache remote ping`, `pull` and `compile`
// against a Redis server and an HTTP server that trickle their replies at
// 1 KiB/s (tests/support/misbehaving_server.py) end within the remote's
// deadline, with one warning, instead of waiting until killed (40-150 s).
// Item 8: a rediss:// remote whose certificate a private CA signed, trusted
// through KCACHE_REMOTE_CA_FILE.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "integration/cli_shell.hpp"
#include "support/misbehaving_server.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certificates.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

using Clock = std::chrono::steady_clock;

class CliRemoteDeadline : public test::CliShell {};

TEST_F(CliRemoteDeadline, PingPullAndCompileEndWithinTheDeadlineOfATricklingServer) {
  KCACHE_REQUIRE_TOOLKIT();
  test::write_file(dir() / "k.cu", "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n");
  for (const char* mode : {"redis-trickle", "http-trickle"}) {
    std::string why;
    auto server = test::MisbehavingServer::start(mode, &why);
    ASSERT_NE(server, nullptr) << why;
    const std::string url = (std::string(mode) == "redis-trickle" ? server->redis_url() : server->http_url()) +
                            "?connect_timeout_ms=200&timeout_ms=500";
    const std::string env = "KCACHE_REMOTE='" + url + "' ";
    // Bounds on a hang, not performance figures: a few deadlines (0.7 s
    // each) plus the process's own work; the trickle alone takes 32 s.
    auto start = Clock::now();
    test::ShellRun r = sh(env + "\"$K\" remote ping");
    if (std::string(mode) == "redis-trickle") {  // HTTP's ping is a HEAD: no body to trickle
      EXPECT_NE(r.rc, 0) << mode << ": " << r.out << r.err;
      EXPECT_NE((r.out + r.err).find("timeout"), std::string::npos) << mode << ": " << r.out << r.err;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << mode;

    start = Clock::now();
    r = sh(env + "\"$K\" pull " + std::string(64, 'a'));
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << mode << ": " << r.out << r.err;

    start = Clock::now();
    r = sh(env + "\"$K\" compile k.cu --target ptx --arch sm_90 -o k.ptx");
    EXPECT_EQ(r.rc, 0) << mode << ": " << r.err;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(15)) << mode << ": " << r.err;
    EXPECT_FALSE(test::read_file(dir() / "k.ptx").empty()) << mode;
  }
}

TEST_F(CliRemoteDeadline, ARedissRemoteIsTrustedThroughRemoteCaFile) {
  std::string why;
  ASSERT_TRUE(test::make_tls_certificates(root() / "tls", &why)) << why;
  const int port = test::free_port();
  auto server = test::RedisServer::start(root() / "redis", &why, test::redis_tls_arguments(root() / "tls", port));
  ASSERT_NE(server, nullptr) << why;
  const std::string url = "rediss://127.0.0.1:" + std::to_string(port);
  test::ShellRun r = sh("KCACHE_REMOTE='" + url + "' \"$K\" remote ping");
  EXPECT_NE(r.rc, 0) << "the test's CA is not in the system store: " << r.out;
  EXPECT_NE((r.out + r.err).find("not trusted"), std::string::npos) << r.out << r.err;
  r = sh("KCACHE_REMOTE='" + url + "' KCACHE_REMOTE_CA_FILE='" + (root() / "tls" / "ca.pem").string() +
         "' \"$K\" remote ping");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("redis 7"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kcache
