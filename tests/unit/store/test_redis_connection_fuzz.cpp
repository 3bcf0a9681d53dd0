// Fuzzing of kcache's own RESP2 reader (store/remote/redis_connection.hpp;
// TESTING.md F09: every parser of remote records). A small server on
// 127.0.0.1, started by the test, answers each connection's one command with
// bytes built from valid RESP2 pieces and then mutated (truncated at every
// point, bytes flipped, lengths made negative, huge or non-numeric, array
// counts of millions, nesting deeper than the bound, CRLFs dropped, NUL bytes
// inserted), and closes its side. The seeds are fixed: every run serves the
// same bytes.
//
// Each reply is also read by a reference reader (below: a plain recursive
// reading of the whole byte string, with the bounds the header documents).
// For every trial the connection must return, with no timeout (the server
// always closes, so every byte the reader waits for is there or never comes),
// and:
//  - where the reference reads a reply, exactly that reply (for unmutated
//    replies this is the reply that was built);
//  - where the reference refuses the bytes, an error of the same kind:
//    k_reply_too_large for a bulk over max_bulk, io for anything malformed or
//    cut short.
// Declared lengths of 1 GiB and more are refused on their header: the test's
// peak resident set grows by far less than one of them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "store/remote/redis_connection.hpp"
#include "support/child.hpp"

namespace kr = kcache::remote;
using kcache::ErrorCode;
using Clock = std::chrono::steady_clock;
using kcache::test::peak_rss;

namespace {

// The bounds redis_connection.cpp documents (its header): lines and the read
// buffer at 64 KiB, arrays at 8 levels and 1 M elements, a reply's bytes at
// max_bulk + 1 MiB.
constexpr std::size_t k_read_buffer = 64 * 1024;
constexpr int k_max_depth = 8;
constexpr long long k_max_elements = 1 << 20;
constexpr std::uint64_t k_reply_slack = 1 << 20;

// The operation's deadline; "bounded, not hung" is checked against 3x it (not
// a performance figure: a trial takes well under a millisecond).
constexpr auto k_timeout = std::chrono::seconds(5);

const std::string k_command = "*2\r\n$3\r\nGET\r\n$4\r\nfuzz\r\n";

// ---- the reference reader ----

enum class Refusal { too_large, io };
using RefResult = std::variant<kr::RedisReply, Refusal>;

struct RefReader {
  std::string_view bytes;
  std::size_t pos = 0;
  std::uint64_t max_bulk = 0;
  std::uint64_t left = 0;

  std::optional<std::string_view> line(Refusal& why) {
    const auto end = bytes.find("\r\n", pos);
    if (end == std::string_view::npos || end - pos + 2 > k_read_buffer) {
      why = Refusal::io;  // cut short, or a line that does not fit the buffer
      return std::nullopt;
    }
    if (end - pos + 2 > left) {
      why = Refusal::too_large;
      return std::nullopt;
    }
    left -= end - pos + 2;
    const auto l = bytes.substr(pos, end - pos);
    pos = end + 2;
    return l;
  }

  static std::optional<long long> integer(std::string_view s) {
    long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) {
      return std::nullopt;
    }
    return v;
  }

  RefResult reply(int depth) {
    Refusal why{};
    const auto l = line(why);
    if (!l) {
      return why;
    }
    if (l->empty()) {
      return Refusal::io;
    }
    const std::string_view rest = l->substr(1);
    kr::RedisReply out;
    switch (l->front()) {
      case '+': out.type = kr::RedisReply::Type::status; out.str = rest; return out;
      case '-': out.type = kr::RedisReply::Type::error; out.str = rest; return out;
      case ':': {
        const auto v = integer(rest);
        if (!v) {
          return Refusal::io;
        }
        out.type = kr::RedisReply::Type::integer;
        out.integer = *v;
        return out;
      }
      case '$': {
        const auto n = integer(rest);
        if (!n || *n < -1) {
          return Refusal::io;
        }
        if (*n == -1) {
          return out;
        }
        const auto u = static_cast<std::uint64_t>(*n);
        if (u > max_bulk || u + 2 > left) {
          return Refusal::too_large;
        }
        left -= u + 2;
        if (bytes.size() - pos < u + 2 || bytes.substr(pos + u, 2) != "\r\n") {
          return Refusal::io;
        }
        out.type = kr::RedisReply::Type::string;
        out.str = bytes.substr(pos, u);
        pos += u + 2;
        return out;
      }
      case '*': {
        const auto n = integer(rest);
        if (!n || *n < -1 || *n > k_max_elements || depth >= k_max_depth) {
          return Refusal::io;
        }
        if (*n == -1) {
          return out;
        }
        out.type = kr::RedisReply::Type::array;
        for (long long i = 0; i < *n; ++i) {
          auto e = reply(depth + 1);
          if (auto* r = std::get_if<Refusal>(&e)) {
            return *r;
          }
          out.elements.push_back(std::move(std::get<kr::RedisReply>(e)));
        }
        return out;
      }
      default: return Refusal::io;
    }
  }
};

RefResult reference_read(std::string_view bytes, std::uint64_t max_bulk) {
  RefReader r{bytes, 0, max_bulk, max_bulk + k_reply_slack};
  return r.reply(0);
}

bool same(const kr::RedisReply& a, const kr::RedisReply& b) {
  if (a.type != b.type || a.str != b.str || a.integer != b.integer || a.elements.size() != b.elements.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.elements.size(); ++i) {
    if (!same(a.elements[i], b.elements[i])) {
      return false;
    }
  }
  return true;
}

// ---- the server: one reply per connection, then its side closed ----

class ReplyServer {
 public:
  ReplyServer() {
    m_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (m_listen < 0 || ::bind(m_listen, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(m_listen, 16) != 0 || ::getsockname(m_listen, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    m_port = ntohs(a.sin_port);
    m_thread = std::thread([this] { serve(); });
  }
  ~ReplyServer() {
    if (m_listen >= 0) {
      ::shutdown(m_listen, SHUT_RDWR);  // wakes accept()
    }
    if (m_thread.joinable()) {
      m_thread.join();
    }
    if (m_listen >= 0) {
      ::close(m_listen);
    }
  }
  ReplyServer(const ReplyServer&) = delete;
  ReplyServer& operator=(const ReplyServer&) = delete;

  int port() const { return m_port; }
  // The bytes the next connection is answered with.
  void set_reply(std::string bytes) {
    std::lock_guard lock(m_mutex);
    m_reply = std::move(bytes);
  }
  // Connections whose command was not the expected one.
  int bad_commands() const { return m_bad_commands; }

 private:
  void serve() {
    for (;;) {
      const int fd = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        return;
      }
      // The whole command first: its bytes are never left unread (closing
      // over unread bytes would reset the connection and drop the reply).
      std::string got;
      char buf[4096];
      while (got.size() < k_command.size()) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
          break;
        }
        got.append(buf, static_cast<std::size_t>(n));
      }
      if (got != k_command) {
        ++m_bad_commands;
      }
      std::string reply;
      {
        std::lock_guard lock(m_mutex);
        reply = m_reply;
      }
      std::string_view out = reply;
      while (!out.empty()) {
        const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
        if (n <= 0) {
          break;  // the client refused the reply and closed
        }
        out.remove_prefix(static_cast<std::size_t>(n));
      }
      ::shutdown(fd, SHUT_WR);
      while (::recv(fd, buf, sizeof buf, 0) > 0) {
      }
      ::close(fd);
    }
  }

  int m_listen = -1;
  int m_port = 0;
  std::thread m_thread;
  std::mutex m_mutex;
  std::string m_reply;
  std::atomic<int> m_bad_commands{0};
};

// ---- building and mutating replies ----

std::string random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) {
    // Mostly CR, LF and NUL: the bytes a reader could mistake for structure.
    const auto pick = rng() % 8;
    c = pick == 0 ? '\r' : pick == 1 ? '\n' : pick == 2 ? '\0' : static_cast<char>(rng());
  }
  return s;
}

std::string text(std::mt19937_64& rng, std::size_t n) {
  std::string s(n, 'a');
  for (auto& c : s) {
    c = static_cast<char>(' ' + rng() % 95);
  }
  return s;
}

// A valid reply, serialized; `depth` levels of arrays so far, none deeper
// than `max_depth`. `large`: bodies over the read buffer may be built (not in
// arrays of thousands, which would then pass the reply's byte bound).
std::string build(std::mt19937_64& rng, int depth, int max_depth, bool large = true) {
  const auto kind = rng() % 9;
  switch (kind) {
    case 0: return "+" + text(rng, rng() % 20) + "\r\n";
    case 1: return "-ERR " + text(rng, rng() % 20) + "\r\n";
    case 2: {
      static constexpr long long k_ints[] = {0, 1, -1, 42, INT64_MAX, INT64_MIN};
      const long long v = rng() % 2 ? k_ints[rng() % 6] : static_cast<long long>(rng());
      return ":" + std::to_string(v) + "\r\n";
    }
    case 3: return "$-1\r\n";
    case 4: return "*-1\r\n";
    case 5: case 6: {
      // Now and then a body larger than the read buffer: it crosses refills.
      const std::size_t n = large && rng() % 16 == 0 ? k_read_buffer + rng() % 5000 : rng() % 300;
      return "$" + std::to_string(n) + "\r\n" + random_bytes(rng, n) + "\r\n";
    }
    default: {
      if (depth >= max_depth) {
        return ":" + std::to_string(depth) + "\r\n";
      }
      const std::size_t n = rng() % 32 == 0 ? 1000 + rng() % 3000 : rng() % 5;
      std::string s = "*" + std::to_string(n) + "\r\n";
      for (std::size_t i = 0; i < n; ++i) {
        s += build(rng, depth + 1, n > 5 ? depth + 1 : max_depth, large && n <= 5);
      }
      return s;
    }
  }
}

// Positions of the numbers after '$' and '*' type bytes (a guess: also inside
// bodies; a mutation there is as good as any other).
std::vector<std::pair<std::size_t, std::size_t>> numbers(const std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i + 1 < s.size(); ++i) {
    if ((s[i] == '$' || s[i] == '*') && (i == 0 || s[i - 1] == '\n')) {
      const auto end = s.find("\r\n", i + 1);
      if (end != std::string::npos) {
        out.emplace_back(i + 1, end - i - 1);
      }
    }
  }
  return out;
}

std::string mutate(std::mt19937_64& rng, std::string s) {
  static const std::vector<std::string> k_lengths = {
      "-2", "-1", "0", "1073741824", "1073741823", "4294967296", "9223372036854775807", "99999999999999999999",
      "-9223372036854775808", "1048576", "1048577", "3000000", "12a", "", " 5", "+5", "5 ", "0x10",
      std::string("1\0" "0", 3)};
  const auto kind = rng() % 8;
  switch (kind) {
    case 0: s.resize(rng() % (s.size() + 1)); break;  // truncated
    case 1:                                            // bytes flipped
      for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n && !s.empty(); ++i) {
        s[rng() % s.size()] ^= static_cast<char>(1 + rng() % 255);
      }
      break;
    case 2: case 3: {  // a length or count replaced
      const auto at = numbers(s);
      if (!at.empty()) {
        const auto [p, n] = at[rng() % at.size()];
        s.replace(p, n, k_lengths[rng() % k_lengths.size()]);
      }
      break;
    }
    case 4: {  // a CRLF (or half of one) dropped
      const auto p = s.find("\r\n", rng() % (s.size() + 1));
      if (p != std::string::npos) {
        s.erase(p + (rng() % 3 == 1 ? 1 : 0), rng() % 3 == 0 ? 2 : 1);
      }
      break;
    }
    case 5: s.insert(rng() % (s.size() + 1), 1, '\0'); break;  // a NUL byte
    case 6: {                                                  // nested past the bound
      const int levels = 7 + static_cast<int>(rng() % 4);
      std::string wrap;
      for (int i = 0; i < levels; ++i) {
        wrap += "*1\r\n";
      }
      s = wrap + s;
      break;
    }
    default: s.insert(rng() % (s.size() + 1), random_bytes(rng, 1 + rng() % 8)); break;
  }
  return s;
}

// ---- one trial ----

class RedisConnectionFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(m_server.port(), 0) << "cannot listen on 127.0.0.1";
    m_spec = *kr::parse_remote_url("redis://127.0.0.1:" + std::to_string(m_server.port()));
  }

  // Serves `bytes` to one command; checks the connection against the
  // reference reader. `what` names the trial in failures.
  void trial(const std::string& bytes, std::uint64_t max_bulk, const std::string& what) {
    m_server.set_reply(bytes);
    auto c = kr::RedisConnection::connect(m_spec, "127.0.0.1", m_server.port());
    ASSERT_TRUE(c) << what << ": " << c.error().message;
    const auto start = Clock::now();
    const auto got = (*c)->command({"GET", "fuzz"}, start + k_timeout, max_bulk);
    ASSERT_LT(Clock::now() - start, 3 * k_timeout) << what;  // bounded, not hung
    const RefResult want = reference_read(bytes, max_bulk);
    ++m_trials;
    if (const auto* r = std::get_if<kr::RedisReply>(&want)) {
      ++m_read;
      ASSERT_TRUE(got) << what << ": the reference reads a reply, the connection failed: " << got.error().message;
      ASSERT_TRUE(same(*got, *r)) << what << ": another reply than the reference's";
      EXPECT_FALSE((*c)->broken()) << what;
    } else {
      ASSERT_FALSE(got) << what << ": the reference refuses these bytes, the connection read a reply";
      ASSERT_NE(got.error().code, ErrorCode::timeout) << what << ": " << got.error().message;
      const auto why = std::get<Refusal>(want);
      ASSERT_EQ(got.error().code, why == Refusal::too_large ? kr::k_reply_too_large : ErrorCode::io)
          << what << ": " << got.error().message;
      EXPECT_TRUE((*c)->broken()) << what;
      ++(why == Refusal::too_large ? m_too_large : m_io);
    }
  }

  ReplyServer m_server;
  kr::RemoteSpec m_spec;
  int m_trials = 0, m_read = 0, m_too_large = 0, m_io = 0;
};

// Unmutated replies: read exactly as built.
TEST_F(RedisConnectionFuzz, ValidRepliesReadExactly) {
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    std::mt19937_64 rng(seed);
    const std::string bytes = build(rng, 0, 1 + static_cast<int>(rng() % 7));
    RefReader ref{bytes, 0, 1 << 20, (1 << 20) + k_reply_slack};
    const auto want = ref.reply(0);
    ASSERT_TRUE(std::holds_alternative<kr::RedisReply>(want)) << "seed " << seed << ": the builder made a bad reply";
    ASSERT_EQ(ref.pos, bytes.size()) << "seed " << seed;
    trial(bytes, 1 << 20, "valid, seed " + std::to_string(seed));
    if (HasFatalFailure()) {
      return;
    }
  }
  EXPECT_EQ(m_read, m_trials);
  EXPECT_EQ(m_server.bad_commands(), 0);
}

// One reply of every kind, cut at every byte: a reply only when whole.
TEST_F(RedisConnectionFuzz, TruncatedAtEveryPoint) {
  static constexpr char k_whole[] = "*7\r\n+OK\r\n-ERR no\r\n:-12\r\n$5\r\na\r\n\0b\r\n$-1\r\n*-1\r\n*2\r\n$0\r\n\r\n*0\r\n";
  const std::string bytes(k_whole, sizeof k_whole - 1);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    trial(bytes.substr(0, n), 1 << 20, "cut at " + std::to_string(n));
    if (HasFatalFailure()) {
      return;
    }
  }
  EXPECT_EQ(m_io, static_cast<int>(bytes.size()));
  trial(bytes, 1 << 20, "whole");
  EXPECT_EQ(m_read, 1);
}

// Mutated replies: the reference's reply or an error of its kind; declared
// sizes of a GiB and more allocate nothing.
TEST_F(RedisConnectionFuzz, MutatedRepliesReadOrRefused) {
  const std::uint64_t rss_before = peak_rss();
  for (std::uint64_t seed = 1; seed <= 3000; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const std::string bytes = mutate(rng, build(rng, 0, 1 + static_cast<int>(rng() % 8)));
    // Mostly a 1 MiB bound; now and then a tiny one, so bodies that fit it
    // otherwise are refused on their header.
    const std::uint64_t max_bulk = rng() % 8 == 0 ? rng() % 64 : 1 << 20;
    trial(bytes, max_bulk, "mutated, seed " + std::to_string(seed));
    if (HasFatalFailure()) {
      return;
    }
  }
  // Declared 1 GiB, 1 TiB and 2^63-1 bulks and a 1 M-element array: refused
  // or failed without buffering what they declare.
  for (const char* huge : {"$1073741824\r\nabc", "$1099511627776\r\n", "$9223372036854775807\r\nx\r\n",
                           "*1048576\r\n:1\r\n", "*1048577\r\n:1\r\n", "*3000000\r\n$1073741824\r\n"}) {
    trial(huge, 1 << 20, std::string("huge ") + huge);
    trial(huge, std::uint64_t{1} << 29, std::string("huge, 512 MiB bound ") + huge);
    if (HasFatalFailure()) {
      return;
    }
  }
  // Far below one declared GiB (the reader's buffer is 64 KiB, the largest
  // reply built a few hundred KiB).
  EXPECT_LT(peak_rss() - rss_before, std::uint64_t{256} << 20);
  // Every outcome was met, so the mutations reach each path.
  EXPECT_GT(m_read, 100);
  EXPECT_GT(m_too_large, 50);
  EXPECT_GT(m_io, 500);
  EXPECT_EQ(m_server.bad_commands(), 0);
  std::printf("trials %d: read %d, too_large %d, io %d\n", m_trials, m_read, m_too_large, m_io);
}

}  // namespace
