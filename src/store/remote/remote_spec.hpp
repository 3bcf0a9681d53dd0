// store/remote/remote_spec.hpp: one configured remote, parsed from its URL.
//
//   redis://[user[:password]@]host[:port][/db][?attrs]     (port 6379, db 0)
//   rediss://...                                           (the same over TLS)
//   redis+unix:///path/to/socket[?db=N&attrs]
//   redis+cluster://host:port[,host:port...][?attrs]       (seeds; port 6379)
//   rediss+cluster://...                                   (the same over TLS)
//   http://[user[:password]@]host[:port]/prefix, https://...  (basic credentials)
//   attrs := attr ("&" attr)*
//   attr  := read_only=BOOL | connect_timeout_ms=N | timeout_ms=N
//          | max_entry_size=SIZE | ttl_s=N | db=N (redis+unix)
//          | bearer_token_file=PATH | bearer_token_env=VAR        (http, https)
//          | basic_auth_file=PATH | basic_auth_env=VAR            (http, https: "user:password")
//          | ca_file=PATH                          (https, rediss, rediss+cluster: trust this CA bundle
//                                                                  instead of the system's)
//
// User and password are percent-decoded. A URL never contains spaces (the
// KCACHE_REMOTE list is space-separated): percent-encode them. masked() is the
// only form that logs, errors and `kcache config` ever print (TESTING S04).
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::remote {

enum class Scheme { redis, redis_unix, redis_cluster, http, https };

struct RemoteSpec {
  Scheme scheme = Scheme::redis;
  std::string host;      // redis, http(s): host name or address; cluster: "h:p,h:p"
  int port = 0;
  std::string path;      // redis+unix: the socket; http(s): the prefix
  std::string user;      // secret-free, but printed only as part of masked()
  std::string password;  // never printed
  int db = 0;
  bool tls = false;      // rediss://, rediss+cluster://: Redis over TLS (the scheme stays redis / redis_cluster)
  bool read_only = false;
  std::uint32_t connect_timeout_ms = 500;
  std::uint32_t timeout_ms = 2000;
  std::uint64_t max_entry_size = std::uint64_t{256} << 20;
  std::uint64_t ttl_s = 0;  // 0: no expiry set by kcache (the server's eviction decides)
  // HTTP credentials are named, never inlined: the secret is read when used.
  std::string bearer_token_file;
  std::string bearer_token_env;
  std::string basic_auth_file;
  std::string basic_auth_env;
  // A PEM file of CA certificates that verify the server (a private CA);
  // empty: the system's CA store.
  std::string ca_file;

  // The URL with any password replaced by "***", and attributes that differ
  // from their defaults, e.g. "redis://ci:***@cache:6379/2?read_only=true".
  std::string masked() const;
};

// Parses one URL. Returns invalid_argument naming the (masked) URL and the
// part that is wrong; the message never contains the password.
Result<RemoteSpec> parse_remote_url(std::string_view url);

}  // namespace kcache::remote
