// store/remote/redis_object_commands.hpp: the single-key commands that both
// Redis backends (standalone and Cluster) send for one object, and what their
// replies mean (private).
//
//   get     GETRANGE name 0 max_bytes   "" (a missing key) is a miss: no object is empty
//   put     SET name value NX [EX ttl]  "OK" written; nil: already there
//   remove  DEL name                    1 removed; 0 there was none
//   exists  EXISTS name                 1 there; 0 not
//   list    SCAN cursor MATCH prefix* COUNT 1000, until the cursor is "0"
//           (one server; a cluster walks every master)
//
// and the commands of a cross-host lease (docs/single-flight.md), whose value
// is the owner's token:
//
//   take     SET name token NX PX ttl_ms                   "OK" taken; nil: another owner holds it
//   renew    EVAL k_lease_renew_script 1 name token ttl_ms  1 renewed; 0 not (or no longer) the owner
//   release  EVAL k_lease_release_script 1 name token       1 deleted; 0 not the owner (left alone)
//   inspect  EVAL k_lease_inspect_script 1 name             nil: no lease; else {value, PTTL}
//   foreign  EVAL k_lease_foreign_script 1 name seen token ttl_ms
//            1: the lease still held `seen` with no expiry (PTTL -1) or one
//            longer than ttl_ms, and now holds token PX ttl_ms; 0: left alone
//
// Renew and release compare the value with the token and act only when they
// match, atomically (a script runs without interleaving), so an owner whose
// lease expired and was taken over never extends or deletes the new owner's.
//
// `send` delivers one command to the server that holds `name` (a connection
// of the pool, or the cluster node of its slot), within the deadline of the
// operation it belongs to, and returns its reply; a bulk string in the reply
// longer than `max_bulk` is refused before it is read (k_reply_too_large).
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
#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

using RedisSend = std::function<Result<RedisReply>(const std::vector<std::string_view>& argv, std::uint64_t max_bulk)>;

// The largest bulk string a reply other than an object's may hold (INFO,
// CLUSTER SLOTS entries, tokens).
inline constexpr std::uint64_t k_small_reply = 64 * 1024;

// Value: the object (at most max_bytes). Miss: std::nullopt. Failure: the
// send's error; k_reply_too_large when the object is larger than max_bytes
// (refused on the reply's header: none of its bytes are read or held); io
// for an error reply.
// The first `bytes` bytes of object `name` (GETRANGE 0 bytes-1): the whole
// object when shorter; std::nullopt when there is none.
Result<std::optional<std::string>> redis_get_prefix(const RedisSend& send, std::string_view name, std::uint64_t bytes,
                                                    std::string_view where);
Result<std::optional<std::string>> redis_get_object(const RedisSend& send, std::string_view name,
                                                    std::uint64_t max_bytes, std::string_view where);

// True when written, false when an object of that name was there. Failure:
// permission_denied (NOPERM, READONLY), no_space (OOM), io.
Result<bool> redis_put_object(const RedisSend& send, std::string_view name, std::string_view value,
                              std::uint64_t ttl_s, std::string_view where);

// True when an object was removed, false when there was none.
Result<bool> redis_remove_object(const RedisSend& send, std::string_view name, std::string_view where);

// True when an object named `name` exists.
Result<bool> redis_object_exists(const RedisSend& send, std::string_view name, std::string_view where);

// Walks the names that start with `prefix` on the server behind `send`
// (RemoteBackend::list). `prefix` must hold no glob character (*?[]\\).
// Failure: the send's error, or io for an error reply or a malformed one.
Result<void> redis_scan_objects(const RedisSend& send, std::string_view prefix,
                                const std::function<bool(std::string_view name)>& each, std::string_view where);

// The lease scripts (Lua, run by EVAL; Redis 2.6 and later).
inline constexpr std::string_view k_lease_renew_script =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
inline constexpr std::string_view k_lease_release_script =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

inline constexpr std::string_view k_lease_inspect_script =
    "local v = redis.call('GET', KEYS[1]) if not v then return false end "
    "return {v, redis.call('PTTL', KEYS[1])}";
inline constexpr std::string_view k_lease_foreign_script =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local t = redis.call('PTTL', KEYS[1]) "
    "if t ~= -1 and t <= tonumber(ARGV[3]) then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1";

// True when this call took the lease `name` for `token` (expiring after
// `ttl_ms` unless renewed), false when another owner holds it.
Result<bool> redis_lease_take(const RedisSend& send, std::string_view name, std::string_view token,
                              std::uint64_t ttl_ms, std::string_view where);
// True when `token` still owned the lease and its expiry was pushed to `ttl_ms` from now.
Result<bool> redis_lease_renew(const RedisSend& send, std::string_view name, std::string_view token,
                               std::uint64_t ttl_ms, std::string_view where);
// True when `token` owned the lease and it was deleted.
Result<bool> redis_lease_release(const RedisSend& send, std::string_view name, std::string_view token,
                                 std::string_view where);

// The lease's value and PTTL; std::nullopt when there is none.
Result<std::optional<LeaseInfo>> redis_lease_inspect(const RedisSend& send, std::string_view name,
                                                     std::string_view where);
// True when the foreign lease holding `seen` was replaced by `token` (see k_lease_foreign_script).
Result<bool> redis_lease_take_foreign(const RedisSend& send, std::string_view name, std::string_view seen,
                                      std::string_view token, std::uint64_t ttl_ms, std::string_view where);

}  // namespace kcache::remote
