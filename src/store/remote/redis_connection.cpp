#include "store/remote/redis_connection.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

timeval to_timeval(std::uint32_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

RedisReply copy_reply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::string; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::status; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::error; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::integer; out.integer = r->integer; break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) {
        out.elements.push_back(copy_reply(r->element[i]));
      }
      break;
    default: out.type = RedisReply::Type::nil; break;
  }
  return out;
}

// Maps a hiredis context error to an Error naming the server.
Error context_error(const redisContext* ctx, const std::string& where, std::string_view doing) {
  const bool timed_out = ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
                                                      std::strstr(ctx->errstr, "timed out") != nullptr ||
                                                      std::strstr(ctx->errstr, "temporarily unavailable") != nullptr);
  return Error{timed_out ? ErrorCode::timeout : ErrorCode::io,
               fmt::format("{} {}: {}{}", doing, where, ctx->errstr,
                           timed_out ? " (no answer within the timeout; raise timeout_ms or check the server)" : ""),
               {}};
}

}  // namespace

Result<std::unique_ptr<RedisConnection>> RedisConnection::connect(const RemoteSpec& spec, const std::string& host,
                                                                  int port) {
  std::unique_ptr<RedisConnection> c(new RedisConnection());
  c->m_where = spec.scheme == Scheme::redis_unix ? spec.masked() : fmt::format("redis://{}:{}", host, port);
  errno = 0;
  c->m_ctx = spec.scheme == Scheme::redis_unix
                 ? redisConnectUnixWithTimeout(spec.path.c_str(), to_timeval(spec.connect_timeout_ms))
                 : redisConnectWithTimeout(host.c_str(), port, to_timeval(spec.connect_timeout_ms));
  if (c->m_ctx == nullptr) {
    return make_error(ErrorCode::io, "cannot connect to " + c->m_where + ": out of memory");
  }
  if (c->m_ctx->err != 0) {
    return tl::unexpected(context_error(c->m_ctx, c->m_where, "cannot connect to"));
  }
  if (redisSetTimeout(c->m_ctx, to_timeval(spec.timeout_ms)) != REDIS_OK) {
    return tl::unexpected(context_error(c->m_ctx, c->m_where, "cannot set the timeout of"));
  }
  if (!spec.password.empty()) {
    std::vector<std::string_view> auth{"AUTH"};
    if (!spec.user.empty()) {
      auth.emplace_back(spec.user);
    }
    auth.emplace_back(spec.password);
    auto r = c->command(auth);
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
    auto r = c->command({"SELECT", db});
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

RedisConnection::~RedisConnection() {
  if (m_ctx != nullptr) {
    redisFree(m_ctx);
  }
}

Result<RedisReply> RedisConnection::command(const std::vector<std::string_view>& argv) {
  if (m_broken) {
    return make_error(ErrorCode::io, "connection to " + m_where + " is broken");
  }
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  errno = 0;
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(m_ctx, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  if (reply == nullptr) {
    m_broken = true;
    return tl::unexpected(context_error(m_ctx, m_where, fmt::format("{} on", argv.empty() ? "" : argv[0])));
  }
  RedisReply out = copy_reply(reply);
  freeReplyObject(reply);
  return out;
}

}  // namespace kcache::remote
