#include "store/remote/redis_object_commands.hpp"

#include <fmt/format.h>

namespace kcache::remote {

Result<std::optional<std::string>> redis_get_object(const RedisSend& send, std::string_view name,
                                                    std::uint64_t max_bytes, std::string_view where) {
  // GETRANGE end is inclusive: asking for 0..max returns up to max + 1 bytes.
  const std::string end = std::to_string(max_bytes);
  auto r = send({"GETRANGE", name, "0", end});
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("GETRANGE on {}: {}", where, r->str));
  }
  // A missing key reads as "": no object is ever empty, so "" is a miss.
  if (r->type != RedisReply::Type::string || r->str.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->str));
}

Result<bool> redis_put_object(const RedisSend& send, std::string_view name, std::string_view value,
                              std::uint64_t ttl_s, std::string_view where) {
  std::vector<std::string_view> argv{"SET", name, value, "NX"};
  const std::string ttl = std::to_string(ttl_s);
  if (ttl_s > 0) {
    argv.emplace_back("EX");
    argv.emplace_back(ttl);
  }
  auto r = send(argv);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    // OOM (maxmemory with noeviction), READONLY (a replica), NOPERM (ACL).
    const auto starts = [&](std::string_view prefix) { return r->str.rfind(prefix, 0) == 0; };
    const ErrorCode code = starts("NOPERM") || starts("READONLY") ? ErrorCode::permission_denied
                           : starts("OOM")                         ? ErrorCode::no_space
                                                                   : ErrorCode::io;
    return make_error(code, fmt::format("SET on {}: {}", where, r->str));
  }
  return r->type == RedisReply::Type::status;  // "OK"; nil when NX found the key
}

Result<bool> redis_remove_object(const RedisSend& send, std::string_view name, std::string_view where) {
  auto r = send({"DEL", name});
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("DEL on {}: {}", where, r->str));
  }
  return r->type == RedisReply::Type::integer && r->integer > 0;
}

}  // namespace kcache::remote
