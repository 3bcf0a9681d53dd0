#include "store/remote/redis_backend.hpp"

#include <fmt/format.h>

#include "store/remote/http_backend.hpp"
#include "store/remote/s3_backend.hpp"
#include "store/remote/redis_cluster_backend.hpp"
#include "store/remote/redis_object_commands.hpp"

namespace kcache::remote {

namespace {
constexpr std::size_t k_max_idle = 4;
}  // namespace

RedisBackend::RedisBackend(RemoteSpec spec) : m_spec(std::move(spec)) {}

RedisBackend::~RedisBackend() = default;

RedisDeadline RedisBackend::operation_deadline() const {
  return RedisClock::now() + std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} + m_spec.timeout_ms);
}

Result<std::unique_ptr<RedisConnection>> RedisBackend::acquire(RedisDeadline deadline) {
  {
    std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      auto c = std::move(m_idle.back());
      m_idle.pop_back();
      return c;
    }
  }
  return RedisConnection::connect(m_spec, m_spec.host, m_spec.port, deadline);
}

void RedisBackend::release(std::unique_ptr<RedisConnection> c) {
  if (c->broken()) {
    return;
  }
  std::lock_guard lock(m_mutex);
  if (m_idle.size() < k_max_idle) {
    m_idle.push_back(std::move(c));
  }
}

Result<RedisReply> RedisBackend::command(const std::vector<std::string_view>& argv, RedisDeadline deadline,
                                         std::uint64_t max_bulk) {
  auto c = acquire(deadline);
  if (!c) {
    return tl::unexpected(c.error());
  }
  auto r = (*c)->command(argv, deadline, max_bulk);
  release(std::move(*c));
  return r;
}

Result<RedisReply> RedisBackend::command(const std::vector<std::string_view>& argv) {
  return command(argv, operation_deadline(), m_spec.max_entry_size + 1);
}

namespace {
// The sender of one operation: every command of it shares `deadline`.
RedisSend sender(RedisBackend& backend, RedisDeadline deadline) {
  return [&backend, deadline](const std::vector<std::string_view>& argv, std::uint64_t max_bulk) {
    return backend.command(argv, deadline, max_bulk);
  };
}
}  // namespace

Result<std::optional<std::string>> RedisBackend::get(std::string_view name, std::uint64_t max_bytes) {
  return redis_get_object(sender(*this, operation_deadline()), name, max_bytes, m_spec.masked());
}

Result<std::optional<std::string>> RedisBackend::get_prefix(std::string_view name, std::uint64_t bytes) {
  return redis_get_prefix(sender(*this, operation_deadline()), name, bytes, m_spec.masked());
}

Result<bool> RedisBackend::put(std::string_view name, std::string_view value, std::uint64_t ttl_s) {
  return redis_put_object(sender(*this, operation_deadline()), name, value, ttl_s, m_spec.masked());
}

Result<bool> RedisBackend::remove(std::string_view name) {
  return redis_remove_object(sender(*this, operation_deadline()), name, m_spec.masked());
}

Result<void> RedisBackend::list(std::string_view prefix, const std::function<bool(std::string_view name)>& each) {
  // A listing is many commands: each SCAN batch gets a whole operation's deadline.
  return redis_scan_objects(
      [this](const std::vector<std::string_view>& argv, std::uint64_t max_bulk) {
        return command(argv, operation_deadline(), max_bulk);
      },
      prefix, each, m_spec.masked());
}

Result<bool> RedisBackend::exists(std::string_view name) {
  return redis_object_exists(sender(*this, operation_deadline()), name, m_spec.masked());
}

Result<bool> RedisBackend::lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  return redis_lease_take(sender(*this, operation_deadline()), name, token, ttl_ms, m_spec.masked());
}

Result<bool> RedisBackend::lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  return redis_lease_renew(sender(*this, operation_deadline()), name, token, ttl_ms, m_spec.masked());
}

Result<bool> RedisBackend::lease_release(std::string_view name, std::string_view token) {
  return redis_lease_release(sender(*this, operation_deadline()), name, token, m_spec.masked());
}

Result<std::string> RedisBackend::describe() {
  auto r = command({"INFO", "server"}, operation_deadline(), k_small_reply);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("INFO on {}: {}", m_spec.masked(), r->str));
  }
  auto field = [&](std::string_view name) -> std::string {
    const std::string needle = std::string(name) + ":";
    const auto at = r->str.find(needle);
    if (at == std::string::npos) {
      return "?";
    }
    const auto end = r->str.find_first_of("\r\n", at);
    return r->str.substr(at + needle.size(), end - at - needle.size());
  };
  return fmt::format("redis {} ({})", field("redis_version"), field("redis_mode"));
}

Result<std::unique_ptr<RemoteBackend>> make_backend(const RemoteSpec& spec) {
  switch (spec.scheme) {
    case Scheme::redis:
    case Scheme::redis_unix:
      return std::unique_ptr<RemoteBackend>(std::make_unique<RedisBackend>(spec));
    case Scheme::redis_cluster: {
      auto cluster = RedisClusterBackend::open(spec);
      if (!cluster) {
        return tl::unexpected(cluster.error());
      }
      return std::unique_ptr<RemoteBackend>(std::move(*cluster));
    }
    case Scheme::http:
    case Scheme::https:
      return std::unique_ptr<RemoteBackend>(std::make_unique<HttpBackend>(spec));
    case Scheme::s3:
      return std::unique_ptr<RemoteBackend>(std::make_unique<S3Backend>(spec));
  }
  return make_error(ErrorCode::unsupported,
                    fmt::format("remote {}: this build of kcache does not serve this scheme yet; use redis://, "
                                "redis+unix://, redis+cluster://, http://, https:// or s3://",
                                spec.masked()));
}

Result<std::optional<LeaseInfo>> RedisBackend::lease_inspect(std::string_view name) {
  return redis_lease_inspect(sender(*this, operation_deadline()), name, m_spec.masked());
}

Result<bool> RedisBackend::lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                              std::uint64_t ttl_ms) {
  return redis_lease_take_foreign(sender(*this, operation_deadline()), name, seen, token, ttl_ms, m_spec.masked());
}

}  // namespace kcache::remote
