// store/remote/redis_object_commands.hpp: the single-key commands that both
// Redis backends (standalone and Cluster) send for one object, and what their
// replies mean (private).
//
//   get     GETRANGE name 0 max_bytes   "" (a missing key) is a miss: no object is empty
//   put     SET name value NX [EX ttl]  "OK" written; nil: already there
//   remove  DEL name                    1 removed; 0 there was none
//
// `send` delivers one command to the server that holds `name` (a connection
// of the pool, or the cluster node of its slot) and returns its reply.
// `where` (the masked URL) names the server in messages.
//
// Thread-safety: as thread-safe as `send`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "store/remote/redis_connection.hpp"

namespace kcache::remote {

using RedisSend = std::function<Result<RedisReply>(const std::vector<std::string_view>& argv)>;

// Value: the object's first max_bytes + 1 bytes at most. Miss: std::nullopt.
// Failure: the send's error, or io for an error reply.
Result<std::optional<std::string>> redis_get_object(const RedisSend& send, std::string_view name,
                                                    std::uint64_t max_bytes, std::string_view where);

// True when written, false when an object of that name was there. Failure:
// permission_denied (NOPERM, READONLY), no_space (OOM), io.
Result<bool> redis_put_object(const RedisSend& send, std::string_view name, std::string_view value,
                              std::uint64_t ttl_s, std::string_view where);

// True when an object was removed, false when there was none.
Result<bool> redis_remove_object(const RedisSend& send, std::string_view name, std::string_view where);

}  // namespace kcache::remote
