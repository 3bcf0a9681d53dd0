// Issue 18 item 1 end to end: `kcache remote ping`, `pull` and `compile`
// against a Redis server and an HTTP server that trickle their replies at
// 1 KiB/s (tests/support/misbehaving_server.py) end within the remote's
// deadline, with one warning, instead of waiting until killed (40-150 s).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "integration/cli_shell.hpp"
#include "support/misbehaving_server.hpp"
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

}  // namespace
}  // namespace kcache
