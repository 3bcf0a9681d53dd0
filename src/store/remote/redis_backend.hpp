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

  Result<std::optional<std::string>> get(std::string_view name, std::uint64_t max_bytes) override;
  Result<std::optional<std::string>> get_prefix(std::string_view name, std::uint64_t bytes) override;
  Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) override;
  Result<bool> remove(std::string_view name) override;
  Result<std::string> describe() override;
  Result<void> list(std::string_view prefix, const std::function<bool(std::string_view name)>& each) override;
  bool supports_leases() const noexcept override { return true; }
  Result<bool> exists(std::string_view name) override;
  Result<bool> lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_release(std::string_view name, std::string_view token) override;
  Result<std::optional<LeaseInfo>> lease_inspect(std::string_view name) override;
  Result<bool> lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                  std::uint64_t ttl_ms) override;

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
