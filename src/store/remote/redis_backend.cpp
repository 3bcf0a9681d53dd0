#include "store/remote/redis_backend.hpp"

#include <fmt/format.h>

#include "store/remote/http_backend.hpp"
#include "store/remote/redis_cluster_backend.hpp"

namespace kcache::remote {

namespace {
constexpr std::size_t k_max_idle = 4;
}  // namespace

RedisBackend::RedisBackend(RemoteSpec spec) : m_spec(std::move(spec)) {}

RedisBackend::~RedisBackend() = default;

Result<std::unique_ptr<RedisConnection>> RedisBackend::acquire() {
  {
    std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      auto c = std::move(m_idle.back());
      m_idle.pop_back();
      return c;
    }
  }
  return RedisConnection::connect(m_spec, m_spec.host, m_spec.port);
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

Result<RedisReply> RedisBackend::command(const std::vector<std::string_view>& argv) {
  auto c = acquire();
  if (!c) {
    return tl::unexpected(c.error());
  }
  auto r = (*c)->command(argv);
  release(std::move(*c));
  return r;
}

Result<std::optional<std::string>> RedisBackend::get(std::string_view name, std::uint64_t max_bytes) {
  // GETRANGE end is inclusive: asking for 0..max returns up to max + 1 bytes.
  const std::string end = std::to_string(max_bytes);
  auto r = command({"GETRANGE", name, "0", end});
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("GETRANGE on {}: {}", m_spec.masked(), r->str));
  }
  // A missing key reads as "": no object is ever empty, so "" is a miss.
  if (r->type != RedisReply::Type::string || r->str.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->str));
}

Result<bool> RedisBackend::put(std::string_view name, std::string_view value, std::uint64_t ttl_s) {
  std::vector<std::string_view> argv{"SET", name, value, "NX"};
  const std::string ttl = std::to_string(ttl_s);
  if (ttl_s > 0) {
    argv.emplace_back("EX");
    argv.emplace_back(ttl);
  }
  auto r = command(argv);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    // OOM (maxmemory with noeviction), READONLY (a replica), NOPERM (ACL).
    const ErrorCode code = r->str.rfind("NOPERM", 0) == 0 || r->str.rfind("READONLY", 0) == 0
                               ? ErrorCode::permission_denied
                           : r->str.rfind("OOM", 0) == 0 ? ErrorCode::no_space
                                                          : ErrorCode::io;
    return make_error(code, fmt::format("SET on {}: {}", m_spec.masked(), r->str));
  }
  return r->type == RedisReply::Type::status;  // "OK"; nil when NX found the key
}

Result<bool> RedisBackend::remove(std::string_view name) {
  auto r = command({"DEL", name});
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("DEL on {}: {}", m_spec.masked(), r->str));
  }
  return r->type == RedisReply::Type::integer && r->integer > 0;
}

Result<std::string> RedisBackend::describe() {
  auto r = command({"INFO", "server"});
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
  }
  return make_error(ErrorCode::unsupported,
                    fmt::format("remote {}: this build of kcache does not serve this scheme yet; use redis://, "
                                "redis+unix://, redis+cluster://, http:// or https://",
                                spec.masked()));
}

}  // namespace kcache::remote
