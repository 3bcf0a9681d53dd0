// store/remote/redis_connection.hpp: one connection to a Redis server that
// kcache drives itself: a non-blocking socket, poll() with the time left to
// the operation's deadline before every send and receive, and a RESP2 reader
// that bounds every reply before it buffers it.
//
// Why not hiredis's blocking API: its timeout acts per read, so a server that
// trickles a reply a few bytes at a time is never cut off, and it buffers a
// whole bulk reply (however large the server says it is) before the caller
// sees its length. Here:
// - every call takes an absolute deadline for the whole operation (connect,
//   AUTH/SELECT, send, receive); past it the call fails with `timeout` and
//   the connection is dropped, however the bytes trickle in;
// - a bulk string's "$<len>\r\n" header is read before its body: a length
//   above the call's `max_bulk` is refused (`too_large`, below) without
//   reading or allocating the body, and the connection is dropped; a body
//   that fits is received straight into the reply's string (no second copy);
// - the reply as a whole is bounded too: lines (status, error, integer,
//   headers) at 64 KiB, arrays at 8 levels and 1 M elements, and all its
//   bytes at max_bulk + 1 MiB.
//
// Wire format (RESP2, what a Redis server speaks before HELLO 3):
//   command := "*" N CRLF ( "$" len CRLF bytes CRLF ){N}
//   reply   := "+" text CRLF | "-" text CRLF | ":" int CRLF
//            | "$" len CRLF bytes CRLF | "$-1" CRLF (nil)
//            | "*" N CRLF reply{N} | "*-1" CRLF (nil)
//
// rediss:// runs the same loop over TLS (tls_session.hpp), the handshake
// within the deadline too.
//
// Host names are resolved with getaddrinfo (not bounded by the deadline;
// numeric addresses and /etc/hosts names resolve at once).
//
// Thread-safety: a RedisConnection is used by one thread at a time
// (RedisBackend keeps a pool of them).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/remote_spec.hpp"
#include "store/remote/tls_session.hpp"

namespace kcache::remote {

// A reply: a status, an error, an integer, a string (bulk or status text),
// nil, or an array of replies.
struct RedisReply {
  enum class Type { string, status, error, integer, nil, array };
  Type type = Type::nil;
  std::string str;
  long long integer = 0;
  std::vector<RedisReply> elements;
};

using RedisClock = std::chrono::steady_clock;
using RedisDeadline = RedisClock::time_point;

// The error code of a reply refused for its size: the server declared a bulk
// string longer than the call allowed (for a GET: an object over
// max_entry_size). Not a failure of the server: RemoteStore counts it as a
// `too_large` rejection.
inline constexpr ErrorCode k_reply_too_large = k_object_too_large;

class RedisConnection {
 public:
  // Connects to `host`:`port` (or the Unix socket spec.path for
  // redis+unix), authenticates with the spec's user/password, selects its
  // db. Connecting is bounded by connect_timeout_ms and by `deadline`, AUTH
  // and SELECT by `deadline`. Failure: io (refused, unreachable), timeout,
  // permission_denied (AUTH refused); the message names the masked URL,
  // never the password.
  static Result<std::unique_ptr<RedisConnection>> connect(const RemoteSpec& spec, const std::string& host, int port,
                                                          RedisDeadline deadline);
  // As above, with the deadline connect_timeout_ms + timeout_ms from now.
  static Result<std::unique_ptr<RedisConnection>> connect(const RemoteSpec& spec, const std::string& host, int port);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command and reads its reply, all of it before `deadline`. A
  // Redis error reply is a successful RedisReply of type `error`. A bulk
  // string longer than `max_bulk` is refused before its body is read
  // (k_reply_too_large). Failure: the connection broke, timed out, or the
  // reply was refused; the connection is then unusable (broken() is true).
  Result<RedisReply> command(const std::vector<std::string_view>& argv, RedisDeadline deadline,
                             std::uint64_t max_bulk);
  // As above, bounded by timeout_ms from now and by the spec's max_entry_size.
  Result<RedisReply> command(const std::vector<std::string_view>& argv);

  bool broken() const noexcept { return m_broken; }
  const std::string& where() const noexcept { return m_where; }
  const RemoteSpec& spec() const noexcept { return m_spec; }

 private:
  struct Budget;  // what one reply may still hold
  explicit RedisConnection(RemoteSpec spec) : m_spec(std::move(spec)) {}

  Result<void> open_socket(const std::string& host, int port, RedisDeadline deadline);
  // Moves at least one byte (sends from, or receives into, `buf`), waiting
  // for the socket as needed until `deadline`; plain or TLS.
  Result<std::size_t> transfer(bool sending, char* buf, std::size_t len, RedisDeadline deadline);
  // Sends all of `bytes` before `deadline`.
  Result<void> send_all(std::string_view bytes, RedisDeadline deadline);
  // Receives at least one byte into m_in (moving its unread bytes to the
  // front when it is full). Failure: closed, error, deadline, or a line that
  // fills the whole buffer.
  Result<void> fill(RedisDeadline deadline);
  Result<std::string_view> read_line(RedisDeadline deadline, Budget& budget);
  Result<RedisReply> read_reply(RedisDeadline deadline, Budget& budget, int depth);
  Error fail(ErrorCode code, std::string_view what);

  RemoteSpec m_spec;
  int m_fd = -1;
  std::unique_ptr<TlsSession> m_tls;  // rediss: TLS over m_fd
  bool m_broken = false;
  std::string m_where;  // masked URL for messages
  std::string m_doing;  // the command in flight, for messages
  std::unique_ptr<char[]> m_in;  // 64 KiB, allocated at the first read
  std::size_t m_in_begin = 0;     // received, not yet parsed: m_in[m_in_begin, m_in_end)
  std::size_t m_in_end = 0;
};

}  // namespace kcache::remote
