#include "store/remote/redis_connection.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

constexpr std::size_t k_max_line = 64 * 1024;
constexpr std::size_t k_read_buffer = k_max_line;  // a reply line must fit in it
constexpr int k_max_depth = 8;
constexpr long long k_max_elements = 1 << 20;
constexpr std::uint64_t k_reply_slack = 1 << 20;  // bytes a reply may hold beyond its largest bulk

int ms_left(RedisDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RedisClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30)) + 1;
}

std::string hint_timeout() { return " (no whole answer within the operation's deadline; raise timeout_ms or check the server)"; }

}  // namespace

struct RedisConnection::Budget {
  std::uint64_t max_bulk = 0;
  std::uint64_t left = 0;  // bytes the whole reply may still take
};

Error RedisConnection::fail(ErrorCode code, std::string_view what) {
  m_broken = true;
  m_tls.reset();
  if (m_fd >= 0) {
    ::close(m_fd);
    m_fd = -1;
  }
  return Error{code,
               fmt::format("{}{}{}: {}{}", m_doing, m_doing.empty() ? "" : " on ", m_where, what,
                           code == ErrorCode::timeout ? hint_timeout() : std::string()),
               {}};
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::connect(const RemoteSpec& spec, const std::string& host,
                                                                  int port) {
  return connect(spec, host, port,
                 RedisClock::now() + std::chrono::milliseconds(std::uint64_t{spec.connect_timeout_ms} + spec.timeout_ms));
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::connect(const RemoteSpec& spec, const std::string& host,
                                                                  int port, RedisDeadline deadline) {
  std::unique_ptr<RedisConnection> c(new RedisConnection(spec));
  c->m_where = spec.scheme == Scheme::redis_unix
                   ? spec.masked()
                   : fmt::format("{}://{}:{}", spec.tls ? "rediss" : "redis", host, port);
  const RedisDeadline connect_deadline =
      std::min(deadline, RedisClock::now() + std::chrono::milliseconds(spec.connect_timeout_ms));
  if (auto r = c->open_socket(host, port, connect_deadline); !r) {
    return tl::unexpected(r.error());
  }
  if (spec.tls) {
    auto tls = TlsSession::handshake(c->m_fd, host, spec.ca_file, deadline);
    if (!tls) {
      c->m_broken = true;
      return make_error(tls.error().code, fmt::format("cannot connect to {}: {}", c->m_where, tls.error().message));
    }
    c->m_tls = std::move(*tls);
  }
  if (!spec.password.empty()) {
    std::vector<std::string_view> auth{"AUTH"};
    if (!spec.user.empty()) {
      auth.emplace_back(spec.user);
    }
    auth.emplace_back(spec.password);
    auto r = c->command(auth, deadline, k_max_line);
    if (!r) {
      return tl::unexpected(r.error());
    }
    if (r->type == RedisReply::Type::error) {
      // The server's text ("WRONGPASS invalid username-password pair") names no secret.
      return make_error(ErrorCode::permission_denied,
                        fmt::format("{} refused the credentials in the URL: {}", c->m_where, r->str));
    }
  }
  if (spec.db != 0) {
    const std::string db = std::to_string(spec.db);
    auto r = c->command({"SELECT", db}, deadline, k_max_line);
    if (!r) {
      return tl::unexpected(r.error());
    }
    if (r->type == RedisReply::Type::error) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} refused database {}: {}", c->m_where, spec.db, r->str));
    }
  }
  return c;
}

Result<void> RedisConnection::open_socket(const std::string& host, int port, RedisDeadline deadline) {
  m_doing = "connecting";
  // Each candidate address in turn, each bounded by what is left of `deadline`.
  auto try_connect = [&](int family, const sockaddr* addr, socklen_t len) -> Result<void> {
    m_fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m_fd < 0) {
      return tl::unexpected(fail(ErrorCode::io, std::strerror(errno)));
    }
    if (::connect(m_fd, addr, len) != 0) {
      if (errno != EINPROGRESS) {
        return tl::unexpected(fail(ErrorCode::io, std::strerror(errno)));
      }
      pollfd p{m_fd, POLLOUT, 0};
      int n = 0;
      do {
        n = ::poll(&p, 1, ms_left(deadline));
      } while (n < 0 && errno == EINTR);
      if (n == 0) {
        auto error = fail(ErrorCode::timeout, "");
        error.message = fmt::format("cannot connect to {}: no connection within connect_timeout_ms (raise "
                                    "connect_timeout_ms or check the server)",
                                    m_where);
        return tl::unexpected(error);
      }
      int err = 0;
      socklen_t el = sizeof err;
      if (n < 0 || ::getsockopt(m_fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        const int e = n < 0 ? errno : err;
        auto error = fail(ErrorCode::io, std::strerror(e));
        error.message = fmt::format("cannot connect to {}: {}", m_where, std::strerror(e));
        return tl::unexpected(error);
      }
    }
    if (family != AF_UNIX) {
      const int one = 1;
      (void)::setsockopt(m_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    m_broken = false;
    return {};
  };
  if (m_spec.scheme == Scheme::redis_unix) {
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (m_spec.path.size() >= sizeof sun.sun_path) {
      return make_error(ErrorCode::invalid_argument, fmt::format("{}: the socket path is too long", m_where));
    }
    std::memcpy(sun.sun_path, m_spec.path.c_str(), m_spec.path.size() + 1);
    auto r = try_connect(AF_UNIX, reinterpret_cast<const sockaddr*>(&sun), sizeof sun);
    m_doing.clear();
    return r;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    m_broken = true;
    return make_error(ErrorCode::io, fmt::format("cannot connect to {}: {}", m_where, ::gai_strerror(rc)));
  }
  Result<void> r = make_error(ErrorCode::io, fmt::format("cannot connect to {}: no address", m_where));
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    r = try_connect(a->ai_family, a->ai_addr, a->ai_addrlen);
    if (r || RedisClock::now() >= deadline) {
      break;
    }
  }
  ::freeaddrinfo(list);
  m_doing.clear();
  return r;
}

RedisConnection::~RedisConnection() {
  m_tls.reset();  // before its socket
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

Result<std::size_t> RedisConnection::transfer(bool sending, char* buf, std::size_t len, RedisDeadline deadline) {
  for (;;) {
    TlsSession::Step step;
    if (m_tls) {
      step = sending ? m_tls->write(buf, len) : m_tls->read(buf, len);
    } else {
      const ssize_t n = sending ? ::send(m_fd, buf, len, MSG_NOSIGNAL) : ::recv(m_fd, buf, len, 0);
      if (n > 0) {
        step.kind = TlsSession::Step::Kind::moved;
        step.bytes = static_cast<std::size_t>(n);
      } else if (n == 0) {
        step.kind = TlsSession::Step::Kind::closed;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        step.kind = TlsSession::Step::Kind::wait;
        step.want_read = !sending;
      } else {
        step.error = std::strerror(errno);
      }
    }
    switch (step.kind) {
      case TlsSession::Step::Kind::moved: return step.bytes;
      case TlsSession::Step::Kind::closed:
        return tl::unexpected(fail(ErrorCode::io, "the server closed the connection"));
      case TlsSession::Step::Kind::failed: return tl::unexpected(fail(ErrorCode::io, step.error));
      case TlsSession::Step::Kind::wait: break;
    }
    pollfd p{m_fd, static_cast<short>(step.want_read ? POLLIN : POLLOUT), 0};
    const int left = ms_left(deadline);
    if (left == 0 || ::poll(&p, 1, left) == 0) {
      return tl::unexpected(fail(ErrorCode::timeout, sending ? "the command could not be sent in time"
                                                             : "the whole reply did not arrive in time"));
    }
  }
}

Result<void> RedisConnection::send_all(std::string_view bytes, RedisDeadline deadline) {
  while (!bytes.empty()) {
    auto n = transfer(true, const_cast<char*>(bytes.data()), bytes.size(), deadline);
    if (!n) {
      return tl::unexpected(n.error());
    }
    bytes.remove_prefix(*n);
  }
  return {};
}

Result<void> RedisConnection::fill(RedisDeadline deadline) {
  if (!m_in) {
    m_in = std::make_unique_for_overwrite<char[]>(k_read_buffer);
  }
  if (m_in_begin == m_in_end) {
    m_in_begin = m_in_end = 0;
  } else if (m_in_end == k_read_buffer) {
    if (m_in_begin == 0) {
      return tl::unexpected(fail(ErrorCode::io, "protocol error: a reply line over 64 KiB"));
    }
    std::memmove(m_in.get(), m_in.get() + m_in_begin, m_in_end - m_in_begin);
    m_in_end -= m_in_begin;
    m_in_begin = 0;
  }
  auto n = transfer(false, m_in.get() + m_in_end, k_read_buffer - m_in_end, deadline);
  if (!n) {
    return tl::unexpected(n.error());
  }
  m_in_end += *n;
  return {};
}

Result<std::string_view> RedisConnection::read_line(RedisDeadline deadline, Budget& budget) {
  std::size_t scanned = 0;  // bytes after m_in_begin known to hold no CRLF start
  for (;;) {
    const std::string_view unread(m_in.get() + m_in_begin, m_in_end - m_in_begin);
    const auto end = unread.find("\r\n", scanned);
    if (end != std::string_view::npos) {
      const std::uint64_t took = end + 2;
      if (took > budget.left) {
        return tl::unexpected(fail(k_reply_too_large, "the reply is larger than allowed"));
      }
      budget.left -= took;
      m_in_begin += end + 2;
      return unread.substr(0, end);
    }
    scanned = unread.empty() ? 0 : unread.size() - 1;
    if (auto r = fill(deadline); !r) {  // keeps the unread bytes, moved to the front at most
      return tl::unexpected(r.error());
    }
  }
}

Result<RedisReply> RedisConnection::read_reply(RedisDeadline deadline, Budget& budget, int depth) {
  auto line = read_line(deadline, budget);
  if (!line) {
    return tl::unexpected(line.error());
  }
  if (line->empty()) {
    return tl::unexpected(fail(ErrorCode::io, "protocol error: an empty reply line"));
  }
  const char type = line->front();
  const std::string_view rest = line->substr(1);
  auto integer = [&]() -> std::optional<long long> {
    long long v = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || end != rest.data() + rest.size()) {
      return std::nullopt;
    }
    return v;
  };
  RedisReply out;
  switch (type) {
    case '+': out.type = RedisReply::Type::status; out.str.assign(rest); return out;
    case '-': out.type = RedisReply::Type::error; out.str.assign(rest); return out;
    case ':': {
      const auto v = integer();
      if (!v) {
        return tl::unexpected(fail(ErrorCode::io, "protocol error: a bad integer reply"));
      }
      out.type = RedisReply::Type::integer;
      out.integer = *v;
      return out;
    }
    case '$': {
      const auto len = integer();
      if (!len || *len < -1) {
        return tl::unexpected(fail(ErrorCode::io, "protocol error: a bad bulk length"));
      }
      if (*len == -1) {
        return out;  // nil
      }
      const auto n = static_cast<std::uint64_t>(*len);
      if (n > budget.max_bulk || n + 2 > budget.left) {
        // Refused on its header: the body is neither read nor allocated.
        return tl::unexpected(fail(k_reply_too_large,
                                   fmt::format("the server announced a reply of {} bytes, above the {} allowed; "
                                               "refused without reading it",
                                               n, budget.max_bulk)));
      }
      budget.left -= n + 2;
      out.type = RedisReply::Type::string;
      out.str.resize(static_cast<std::size_t>(n));
      // What is buffered already, then straight from the socket into the reply.
      std::size_t have = std::min<std::size_t>(m_in_end - m_in_begin, static_cast<std::size_t>(n));
      if (have > 0) {
        std::memcpy(out.str.data(), m_in.get() + m_in_begin, have);
      }
      m_in_begin += have;
      while (have < n) {
        auto got = transfer(false, out.str.data() + have, static_cast<std::size_t>(n) - have, deadline);
        if (!got) {
          return tl::unexpected(got.error());
        }
        have += *got;
      }
      while (m_in_end - m_in_begin < 2) {
        if (auto r = fill(deadline); !r) {
          return tl::unexpected(r.error());
        }
      }
      if (m_in[m_in_begin] != '\r' || m_in[m_in_begin + 1] != '\n') {
        return tl::unexpected(fail(ErrorCode::io, "protocol error: a bulk reply not ended by CRLF"));
      }
      m_in_begin += 2;
      return out;
    }
    case '*': {
      const auto count = integer();
      if (!count || *count < -1 || *count > k_max_elements || depth >= k_max_depth) {
        return tl::unexpected(fail(ErrorCode::io, "protocol error: a bad or too deep array"));
      }
      if (*count == -1) {
        return out;  // nil
      }
      out.type = RedisReply::Type::array;
      for (long long i = 0; i < *count; ++i) {
        auto e = read_reply(deadline, budget, depth + 1);
        if (!e) {
          return tl::unexpected(e.error());
        }
        out.elements.push_back(std::move(*e));
      }
      return out;
    }
    default:
      return tl::unexpected(fail(ErrorCode::io, fmt::format("protocol error: unknown reply type '{}'",
                                                            static_cast<unsigned char>(type) < 32 ? '?' : type)));
  }
}

Result<RedisReply> RedisConnection::command(const std::vector<std::string_view>& argv, RedisDeadline deadline,
                                            std::uint64_t max_bulk) {
  if (m_broken || m_fd < 0) {
    return make_error(ErrorCode::io, "connection to " + m_where + " is broken");
  }
  m_doing = argv.empty() ? std::string() : std::string(argv[0]);
  // Small commands go out as one buffer; a large argument (an object) is sent
  // from where it is, without a copy.
  std::string head = fmt::format("*{}\r\n", argv.size());
  for (const auto& a : argv) {
    head += fmt::format("${}\r\n", a.size());
    if (a.size() > 4096) {
      if (auto r = send_all(head, deadline); !r) {
        return tl::unexpected(r.error());
      }
      if (auto r = send_all(a, deadline); !r) {
        return tl::unexpected(r.error());
      }
      head.clear();
    } else {
      head.append(a);
    }
    head += "\r\n";
  }
  if (auto r = send_all(head, deadline); !r) {
    return tl::unexpected(r.error());
  }
  Budget budget{max_bulk, max_bulk > UINT64_MAX - k_reply_slack ? UINT64_MAX : max_bulk + k_reply_slack};
  auto reply = read_reply(deadline, budget, 0);
  if (reply) {
    m_doing.clear();
  }
  return reply;
}

Result<RedisReply> RedisConnection::command(const std::vector<std::string_view>& argv) {
  return command(argv, RedisClock::now() + std::chrono::milliseconds(m_spec.timeout_ms), m_spec.max_entry_size + 1);
}

}  // namespace kcache::remote
