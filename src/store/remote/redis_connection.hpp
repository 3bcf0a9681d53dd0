// store/remote/redis_connection.hpp: one blocking hiredis connection with
// connect and operation timeouts.
//
// Thread-safety: a RedisConnection is used by one thread at a time
// (RedisBackend keeps a pool of them).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "store/remote/remote_spec.hpp"

struct redisContext;
struct redisReply;

namespace kcache::remote {

// A reply, copied out of hiredis: a status, an error, an integer, a string
// (bulk or status text), nil, or an array of replies.
struct RedisReply {
  enum class Type { string, status, error, integer, nil, array };
  Type type = Type::nil;
  std::string str;
  long long integer = 0;
  std::vector<RedisReply> elements;
};

class RedisConnection {
 public:
  // Connects to `host`:`port` (or the Unix socket `unix_path` when not
  // empty), authenticates with the spec's user/password, selects its db.
  // Failure: io (refused, unreachable), timeout, permission_denied (AUTH
  // refused); the message names the masked URL, never the password.
  static Result<std::unique_ptr<RedisConnection>> connect(const RemoteSpec& spec, const std::string& host, int port);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command and waits (bounded by timeout_ms) for its reply. A
  // Redis error reply is a successful RedisReply of type `error`. Failure:
  // the connection broke or timed out; the connection is then unusable
  // (broken() is true).
  Result<RedisReply> command(const std::vector<std::string_view>& argv);

  bool broken() const noexcept { return m_broken; }
  const std::string& where() const noexcept { return m_where; }

 private:
  RedisConnection() = default;
  redisContext* m_ctx = nullptr;
  bool m_broken = false;
  std::string m_where;  // masked URL for messages
};

}  // namespace kcache::remote
