// store/remote/redis_backend.hpp: a standalone Redis server (redis://,
// rediss://, redis+unix://) as a remote backend, on RedisConnection.
//
//   get    -> GETRANGE name 0 max_bytes   (bounded: a larger object is refused on
//                                          its reply's header, never downloaded)
//   put    -> SET name value NX [EX ttl]  (one command: no reader sees half)
//   remove -> DEL name
//   list   -> SCAN cursor MATCH prefix* COUNT 1000
//
// Every operation has one deadline, connect_timeout_ms + timeout_ms from its
// start, for all of it: taking a connection (connecting, AUTH, SELECT:
// connecting itself at most connect_timeout_ms), sending, and receiving the
// whole reply, however slowly it trickles (redis_connection.hpp).
//
// Thread-safety: thread-safe; a pool of idle connections is shared, a broken
// connection is dropped and the next call connects again.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "store/remote/redis_connection.hpp"
#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

class RedisBackend final : public RemoteBackend {
 public:
  explicit RedisBackend(RemoteSpec spec);
  ~RedisBackend() override;

  KCACHE_REMOTE_OBJECT_OVERRIDES;
  KCACHE_REMOTE_INSPECT_OVERRIDES;
  KCACHE_REMOTE_LEASE_OVERRIDES;

  // Runs one command on a pooled connection (tests, benchmarks), within one
  // operation's deadline; a reply may hold up to max_entry_size + 1 bytes.
  Result<RedisReply> command(const std::vector<std::string_view>& argv);
  // As above, before `deadline`, refusing a bulk string over `max_bulk`.
  Result<RedisReply> command(const std::vector<std::string_view>& argv, RedisDeadline deadline,
                             std::uint64_t max_bulk);

 private:
  // The deadline of an operation that starts now.
  RedisDeadline operation_deadline() const;
  Result<std::unique_ptr<RedisConnection>> acquire(RedisDeadline deadline);
  void release(std::unique_ptr<RedisConnection> c);

  RemoteSpec m_spec;
  std::mutex m_mutex;
  std::vector<std::unique_ptr<RedisConnection>> m_idle;
};

}  // namespace kcache::remote
