// store/remote/redis_backend.hpp: a standalone Redis server (redis://,
// redis+unix://) as a remote backend, on hiredis.
//
//   get    -> GETRANGE name 0 max_bytes   (bounded: never more than max+1 bytes)
//   put    -> SET name value NX [EX ttl]  (one command: no reader sees half)
//   remove -> DEL name
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
  Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) override;
  Result<bool> remove(std::string_view name) override;
  Result<std::string> describe() override;
  bool supports_leases() const noexcept override { return true; }
  Result<bool> exists(std::string_view name) override;
  Result<bool> lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;
  Result<bool> lease_release(std::string_view name, std::string_view token) override;
  Result<std::optional<LeaseInfo>> lease_inspect(std::string_view name) override;
  Result<bool> lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                  std::uint64_t ttl_ms) override;

  // Runs one command on a pooled connection (for leases and tests).
  Result<RedisReply> command(const std::vector<std::string_view>& argv);

 private:
  Result<std::unique_ptr<RedisConnection>> acquire();
  void release(std::unique_ptr<RedisConnection> c);

  RemoteSpec m_spec;
  std::mutex m_mutex;
  std::vector<std::unique_ptr<RedisConnection>> m_idle;
};

}  // namespace kcache::remote
