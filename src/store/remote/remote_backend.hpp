// store/remote/remote_backend.hpp: a live connection to one remote server.
//
// As in ccache's storage/remote: one small factory per backend turns a
// RemoteSpec into a connection whose get() returns "value, miss, or failure".
// A backend moves opaque objects by name; it knows nothing of artifacts,
// signatures or verification (remote_codec.hpp, RemoteStore do that).
//
// Every call has one deadline for the whole operation (connecting, sending,
// receiving, redirects, retries; docs/configuration.md, "Deadlines"): a
// server that does not answer in time, or answers too slowly, is a `timeout`
// error, never a hang.
//
// Thread-safety: every method is thread-safe (a backend keeps a small pool of
// connections).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/error.hpp"
#include "store/remote/remote_spec.hpp"

namespace kcache::remote {

// The error code of a get() whose object is larger than its bound: refused
// before it was downloaded. A bad object (RemoteStore counts a `too_large`
// rejection), not a failure of the server.
inline constexpr ErrorCode k_object_too_large = ErrorCode::corrupt;

// What a lease holds now (RemoteBackend::lease_inspect).
struct LeaseInfo {
  std::string value;         // the owner's token (kcache's) or whatever else is stored there
  std::int64_t pttl_ms = 0;  // milliseconds to live; -1: no expiry
};

// The bytes of one object, produced in order for an upload that is not held
// in memory whole (RemoteBackend::put_stream; object_stream.hpp makes them).
// Thread-safety: one thread at a time.
class ObjectSource {
 public:
  virtual ~ObjectSource() = default;
  // The object's length in bytes (known before the first byte).
  virtual std::uint64_t size() const noexcept = 0;
  // Fills up to `n` bytes of `out` with the next bytes; returns how many (0
  // only at the end). Failure: io naming what could not be read.
  virtual Result<std::size_t> read(char* out, std::size_t n) = 0;
  // Starts again from the first byte (a request sent again).
  virtual Result<void> rewind() = 0;
};

// An ObjectSource over bytes held in memory (a small object, one part).
class ViewSource final : public ObjectSource {
 public:
  explicit ViewSource(std::string_view bytes) noexcept : m_bytes(bytes) {}
  std::uint64_t size() const noexcept override { return m_bytes.size(); }
  Result<std::size_t> read(char* out, std::size_t n) override {
    const std::size_t k = std::min(n, m_bytes.size() - m_at);
    std::memcpy(out, m_bytes.data() + m_at, k);
    m_at += k;
    return k;
  }
  Result<void> rewind() override {
    m_at = 0;
    return {};
  }

 private:
  std::string_view m_bytes;
  std::size_t m_at = 0;
};

// Receives the bytes of one object as they arrive (RemoteBackend::get_stream).
// Thread-safety: one thread at a time.
class ObjectSink {
 public:
  virtual ~ObjectSink() = default;
  // Once, before the first byte: the object's length where the server
  // announced it. False stops the transfer.
  virtual bool begin(std::optional<std::uint64_t> size) = 0;
  // The next bytes, in order. False stops the transfer.
  virtual bool write(std::string_view bytes) = 0;
};

class RemoteBackend {
 public:
  virtual ~RemoteBackend() = default;

  // Value: the object's bytes. Miss: std::nullopt. Failure: io / timeout /
  // permission_denied (the server refused), or k_object_too_large for an
  // object larger than `max_bytes`, refused before more than a small
  // constant of it is held (whatever size the server declares or sends).
  virtual Result<std::optional<std::string>> get(std::string_view name, std::uint64_t max_bytes) = 0;

  // True when get_stream() and put_stream() move an object in parts (HTTP,
  // S3); false when they hold it whole in memory (the defaults below: Redis
  // moves a value with one command, bounded by max_entry_size).
  virtual bool streams() const noexcept { return false; }

  // get(), handing the object's bytes to `sink` as they arrive. Value: true
  // when the object was found (all of it went to the sink, unless the sink
  // stopped the transfer), false on a miss. Failure: as get(). Default:
  // get(), then the whole value to the sink.
  virtual Result<bool> get_stream(std::string_view name, std::uint64_t max_bytes, ObjectSink& sink) {
    auto got = get(name, max_bytes);
    if (!got || !got->has_value()) {
      return got.map([](const auto&) { return false; });
    }
    if (sink.begin((*got)->size())) {
      (void)sink.write(**got);
    }
    return true;
  }

  // put() of an object read from `source` in order. Default: reads it whole
  // into memory and calls put().
  virtual Result<bool> put_stream(std::string_view name, ObjectSource& source, std::uint64_t ttl_s) {
    std::string value(source.size(), '\0');
    for (std::size_t at = 0; at < value.size();) {
      auto n = source.read(value.data() + at, value.size() - at);
      if (!n) {
        return tl::unexpected(n.error());
      }
      if (*n == 0) {
        return make_error(ErrorCode::io, "the object to upload ended early");
      }
      at += *n;
    }
    return put(name, value, ttl_s);
  }

  // The first `bytes` bytes of an object (all of it when it is shorter), for
  // a look at its header (`kcache remote ping`). Miss: std::nullopt.
  // `unsupported` for a backend that cannot read part of an object (HTTP).
  virtual Result<std::optional<std::string>> get_prefix(std::string_view name, std::uint64_t bytes) {
    (void)name, (void)bytes;
    return make_error(ErrorCode::unsupported, "this remote reads no part of an object");
  }

  // Writes `value` under `name` in one operation (no reader sees half of it)
  // unless an object of that name exists. Success: true when written, false
  // when it was already there. `ttl_s` > 0 asks the server to expire it.
  virtual Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) = 0;

  // Success: true when an object was removed, false when there was none.
  virtual Result<bool> remove(std::string_view name) = 0;

  // Asks the server who it is. Success: one line (server version, mode).
  virtual Result<std::string> describe() = 0;

  // Walks the names of the objects on the server that start with `prefix`,
  // in batches (Redis: SCAN ... MATCH prefix* COUNT 1000; a cluster: every
  // master): `each` is called once per name found, in no particular order (a
  // name may come twice while the server rehashes), and a `false` from it
  // stops the walk. Success: the walk ended (or was stopped). Failure:
  // `unsupported` for a backend that cannot enumerate its objects (HTTP:
  // WebDAV's PROPFIND is often not served), else io / timeout.
  virtual Result<void> list(std::string_view prefix, const std::function<bool(std::string_view name)>& each) {
    (void)prefix, (void)each;
    return make_error(ErrorCode::unsupported,
                      "listing the objects is not supported by this backend (only redis:// and "
                      "redis+cluster:// remotes can be listed)");
  }

  // Cross-host leases (one compile per key across hosts, docs/single-flight.md;
  // the commands are in redis_object_commands.hpp). A backend without them
  // (HTTP) answers false here and `unsupported` from each call below.
  virtual bool supports_leases() const noexcept { return false; }
  // True when an object named `name` exists (cheaper than get: no bytes move).
  virtual Result<bool> exists(std::string_view name) {
    (void)name;
    return no_leases();
  }
  // True when this call took the lease `name` for `token`, expiring after
  // `ttl_ms`; false when another owner holds it.
  virtual Result<bool> lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
    (void)name, (void)token, (void)ttl_ms;
    return no_leases();
  }
  // True when `token` still owns the lease and it now expires `ttl_ms` from now.
  virtual Result<bool> lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
    (void)name, (void)token, (void)ttl_ms;
    return no_leases();
  }
  // True when `token` owned the lease and it was deleted (another owner's is left alone).
  virtual Result<bool> lease_release(std::string_view name, std::string_view token) {
    (void)name, (void)token;
    return no_leases();
  }
  // The lease's value and time to live; std::nullopt when there is none.
  virtual Result<std::optional<LeaseInfo>> lease_inspect(std::string_view name) {
    (void)name;
    return no_leases();
  }
  // Takes over a foreign lease: true when the lease `name` still holds
  // `seen` and has no expiry or one longer than `ttl_ms` (kcache never writes
  // such a lease), and now holds `token`, expiring after `ttl_ms`. Atomic.
  virtual Result<bool> lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                          std::uint64_t ttl_ms) {
    (void)name, (void)seen, (void)token, (void)ttl_ms;
    return no_leases();
  }

 private:
  static Error no_leases_error() {
    return Error{ErrorCode::unsupported, "this remote has no leases (only redis:// and redis+cluster:// do)", {}};
  }
  struct NoLeases {
    template <class T>
    operator Result<T>() const {  // NOLINT(google-explicit-constructor): any lease call's failure
      return tl::unexpected(no_leases_error());
    }
  };
  static NoLeases no_leases() { return {}; }
};

// The overrides every backend declares (the pure calls of RemoteBackend):
// get(), put(), remove() and describe(), spelled once.
#define KCACHE_REMOTE_OBJECT_OVERRIDES                                                               \
  Result<std::optional<std::string>> get(std::string_view name, std::uint64_t max_bytes) override;    \
  Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) override;      \
  Result<bool> remove(std::string_view name) override;                                              \
  Result<std::string> describe() override

// The overrides a backend that can look into what it holds declares (Redis,
// Redis Cluster, S3), spelled once: get_prefix() reads an object's first
// bytes, list() walks the names.
#define KCACHE_REMOTE_INSPECT_OVERRIDES                                                              \
  Result<std::optional<std::string>> get_prefix(std::string_view name, std::uint64_t bytes) override; \
  Result<void> list(std::string_view prefix, const std::function<bool(std::string_view name)>& each) override

// The overrides a backend that moves objects in parts (HTTP, S3) declares,
// spelled once: streams() answers true, get_stream() and put_stream() are the
// backend's own (their contracts are RemoteBackend's above).
#define KCACHE_REMOTE_STREAM_OVERRIDES                                                               \
  bool streams() const noexcept override { return true; }                                          \
  Result<bool> get_stream(std::string_view name, std::uint64_t max_bytes, ObjectSink& sink) override; \
  Result<bool> put_stream(std::string_view name, ObjectSource& source, std::uint64_t ttl_s) override

// The overrides a backend with cross-host leases (Redis, Redis Cluster, S3)
// declares, spelled once: supports_leases() answers true, and exists() and
// every lease call are the backend's own (contracts above).
#define KCACHE_REMOTE_LEASE_OVERRIDES                                                                          \
  bool supports_leases() const noexcept override { return true; }                                            \
  Result<bool> exists(std::string_view name) override;                                                        \
  Result<bool> lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;      \
  Result<bool> lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) override;     \
  Result<bool> lease_release(std::string_view name, std::string_view token) override;                         \
  Result<std::optional<LeaseInfo>> lease_inspect(std::string_view name) override;                             \
  Result<bool> lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,       \
                                  std::uint64_t ttl_ms) override

// Connects lazily: returns a backend for `spec` without touching the network
// (the first operation connects). Returns unsupported for a scheme this build
// does not serve.
Result<std::unique_ptr<RemoteBackend>> make_backend(const RemoteSpec& spec);

}  // namespace kcache::remote
