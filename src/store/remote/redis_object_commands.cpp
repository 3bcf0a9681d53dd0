#include "store/remote/redis_object_commands.hpp"

#include <fmt/format.h>

namespace kcache::remote {

namespace {

// GETRANGE name 0 `last` with every bulk bounded by `max_bulk`: the bytes,
// or std::nullopt for a missing key (it reads as "": no object is ever empty).
Result<std::optional<std::string>> get_range(const RedisSend& send, std::string_view name, std::uint64_t last,
                                             std::uint64_t max_bulk, std::string_view where) {
  const std::string end = std::to_string(last);
  auto r = send({"GETRANGE", name, "0", end}, max_bulk);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("GETRANGE on {}: {}", where, r->str));
  }
  if (r->type != RedisReply::Type::string || r->str.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->str));
}

}  // namespace

Result<std::optional<std::string>> redis_get_object(const RedisSend& send, std::string_view name,
                                                    std::uint64_t max_bytes, std::string_view where) {
  // GETRANGE end is inclusive: asking for 0..max returns up to max + 1 bytes.
  // A larger object answers max + 1 bytes, whose header is refused by the send.
  auto r = get_range(send, name, max_bytes, max_bytes, where);
  if (!r && r.error().code == k_reply_too_large) {
    return make_error(k_reply_too_large,
                      fmt::format("GETRANGE on {}: the object is larger than max_entry_size ({} bytes); refused "
                                  "without downloading it",
                                  where, max_bytes));
  }
  return r;
}

Result<std::optional<std::string>> redis_get_prefix(const RedisSend& send, std::string_view name, std::uint64_t bytes,
                                                    std::string_view where) {
  if (bytes == 0) {
    return make_error(ErrorCode::invalid_argument, "a prefix of 0 bytes");
  }
  return get_range(send, name, bytes - 1, bytes, where);
}

Result<bool> redis_put_object(const RedisSend& send, std::string_view name, std::string_view value,
                              std::uint64_t ttl_s, std::string_view where) {
  std::vector<std::string_view> argv{"SET", name, value, "NX"};
  const std::string ttl = std::to_string(ttl_s);
  if (ttl_s > 0) {
    argv.emplace_back("EX");
    argv.emplace_back(ttl);
  }
  auto r = send(argv, k_small_reply);
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
  auto r = send({"DEL", name}, k_small_reply);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("DEL on {}: {}", where, r->str));
  }
  return r->type == RedisReply::Type::integer && r->integer > 0;
}

Result<void> redis_scan_objects(const RedisSend& send, std::string_view prefix,
                                const std::function<bool(std::string_view name)>& each, std::string_view where) {
  const std::string match = std::string(prefix) + "*";
  std::string cursor = "0";
  do {
    auto r = send({"SCAN", cursor, "MATCH", match, "COUNT", "1000"}, k_small_reply);
    if (!r) {
      return tl::unexpected(r.error());
    }
    if (r->type == RedisReply::Type::error) {
      return make_error(ErrorCode::io, fmt::format("SCAN on {}: {}", where, r->str));
    }
    if (r->type != RedisReply::Type::array || r->elements.size() != 2 ||
        r->elements[1].type != RedisReply::Type::array) {
      return make_error(ErrorCode::io, fmt::format("SCAN on {}: unexpected reply", where));
    }
    cursor = r->elements[0].str;
    for (const RedisReply& name : r->elements[1].elements) {
      if (!each(name.str)) {
        return {};
      }
    }
  } while (cursor != "0" && !cursor.empty());
  return {};
}

namespace {

// The integer reply of a command; error replies and broken sends are failures.
Result<long long> integer_reply(const RedisSend& send, const std::vector<std::string_view>& argv,
                                std::string_view what, std::string_view where) {
  auto r = send(argv, k_small_reply);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    const ErrorCode code =
        r->str.rfind("NOPERM", 0) == 0 || r->str.rfind("READONLY", 0) == 0 ? ErrorCode::permission_denied : ErrorCode::io;
    return make_error(code, fmt::format("{} on {}: {}", what, where, r->str));
  }
  if (r->type != RedisReply::Type::integer) {
    return make_error(ErrorCode::io, fmt::format("{} on {}: unexpected reply", what, where));
  }
  return r->integer;
}

}  // namespace

Result<bool> redis_object_exists(const RedisSend& send, std::string_view name, std::string_view where) {
  auto n = integer_reply(send, {"EXISTS", name}, "EXISTS", where);
  if (!n) {
    return tl::unexpected(n.error());
  }
  return *n > 0;
}

Result<bool> redis_lease_take(const RedisSend& send, std::string_view name, std::string_view token,
                              std::uint64_t ttl_ms, std::string_view where) {
  const std::string ttl = std::to_string(ttl_ms);
  auto r = send({"SET", name, token, "NX", "PX", ttl}, k_small_reply);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    const ErrorCode code =
        r->str.rfind("NOPERM", 0) == 0 || r->str.rfind("READONLY", 0) == 0 ? ErrorCode::permission_denied
        : r->str.rfind("OOM", 0) == 0                                      ? ErrorCode::no_space
                                                                           : ErrorCode::io;
    return make_error(code, fmt::format("SET NX PX (lease) on {}: {}", where, r->str));
  }
  return r->type == RedisReply::Type::status;  // "OK"; nil: held by another owner
}

Result<bool> redis_lease_renew(const RedisSend& send, std::string_view name, std::string_view token,
                               std::uint64_t ttl_ms, std::string_view where) {
  const std::string ttl = std::to_string(ttl_ms);
  auto n = integer_reply(send, {"EVAL", k_lease_renew_script, "1", name, token, ttl}, "EVAL (lease renew)", where);
  if (!n) {
    return tl::unexpected(n.error());
  }
  return *n > 0;
}

Result<bool> redis_lease_release(const RedisSend& send, std::string_view name, std::string_view token,
                                 std::string_view where) {
  auto n = integer_reply(send, {"EVAL", k_lease_release_script, "1", name, token}, "EVAL (lease release)", where);
  if (!n) {
    return tl::unexpected(n.error());
  }
  return *n > 0;
}

Result<std::optional<LeaseInfo>> redis_lease_inspect(const RedisSend& send, std::string_view name,
                                                     std::string_view where) {
  auto r = send({"EVAL", k_lease_inspect_script, "1", name}, k_small_reply);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->type == RedisReply::Type::error) {
    return make_error(ErrorCode::io, fmt::format("EVAL (lease inspect) on {}: {}", where, r->str));
  }
  if (r->type == RedisReply::Type::nil) {
    return std::optional<LeaseInfo>{};
  }
  if (r->type != RedisReply::Type::array || r->elements.size() != 2 ||
      r->elements[1].type != RedisReply::Type::integer) {
    return make_error(ErrorCode::io, fmt::format("EVAL (lease inspect) on {}: unexpected reply", where));
  }
  return std::optional<LeaseInfo>(LeaseInfo{r->elements[0].str, r->elements[1].integer});
}

Result<bool> redis_lease_take_foreign(const RedisSend& send, std::string_view name, std::string_view seen,
                                      std::string_view token, std::uint64_t ttl_ms, std::string_view where) {
  const std::string ttl = std::to_string(ttl_ms);
  auto n = integer_reply(send, {"EVAL", k_lease_foreign_script, "1", name, seen, token, ttl},
                         "EVAL (foreign lease takeover)", where);
  if (!n) {
    return tl::unexpected(n.error());
  }
  return *n > 0;
}

}  // namespace kcache::remote
