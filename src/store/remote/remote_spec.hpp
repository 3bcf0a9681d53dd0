// store/remote/remote_spec.hpp: one configured remote, parsed from its URL.
//
//   redis://[user[:password]@]host[:port][/db][?attrs]     (port 6379, db 0)
//   rediss://...                                           (the same over TLS)
//   redis+unix:///path/to/socket[?db=N&attrs]
//   redis+cluster://host:port[,host:port...][?attrs]       (seeds; port 6379)
//   rediss+cluster://...                                   (the same over TLS)
//   http://[user[:password]@]host[:port]/prefix, https://...  (basic credentials)
//   s3://bucket[/prefix][?attrs]                           (AWS SigV4; credentials as AWS tools find them)
//   attrs := attr ("&" attr)*
//   attr  := read_only=BOOL | connect_timeout_ms=N | timeout_ms=N
//          | max_entry_size=SIZE | ttl_s=N | db=N (redis+unix)
//          | bearer_token_file=PATH | bearer_token_env=VAR        (http, https)
//          | basic_auth_file=PATH | basic_auth_env=VAR            (http, https: "user:password")
//          | ca_file=PATH                          (https, rediss, rediss+cluster, s3: trust this CA bundle
//                                                                  instead of the system's)
//          | endpoint=URL | region=NAME | addressing=path|virtual
//          | profile=NAME | anonymous=BOOL | multipart_size=SIZE             (s3)
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

enum class Scheme { redis, redis_unix, redis_cluster, http, https, s3 };

// How an S3 bucket is named in its URLs: path-style (endpoint/bucket/key) or
// virtual-hosted (bucket.endpoint/key). automatic: path-style with an
// `endpoint`, virtual-hosted on AWS.
enum class S3Addressing { automatic, path, virtual_host };

struct RemoteSpec {
  Scheme scheme = Scheme::redis;
  std::string host;      // redis, http(s): host name or address; cluster: "h:p,h:p"; s3: the bucket
  int port = 0;
  std::string path;      // redis+unix: the socket; http(s), s3: the prefix ("" or "/a/b")
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
  // S3 (s3_backend.hpp). endpoint: "http(s)://host[:port]" of a non-AWS store
  // (empty: AWS, https://s3.<region>.amazonaws.com). region: empty: from
  // AWS_REGION / AWS_DEFAULT_REGION / the profile's config, else us-east-1.
  std::string endpoint;
  std::string region;
  S3Addressing addressing = S3Addressing::automatic;
  std::string profile;     // empty: AWS_PROFILE, else "default"
  bool anonymous = false;  // send unsigned requests (a public bucket), whatever credentials exist
  // Objects of this size or more upload in parts of this size (S3's least: 5 MiB).
  std::uint64_t multipart_size = std::uint64_t{64} << 20;

  // The URL with any password replaced by "***", and attributes that differ
  // from their defaults, e.g. "redis://ci:***@cache:6379/2?read_only=true".
  std::string masked() const;
};

// Parses one URL. Returns invalid_argument naming the (masked) URL and the
// part that is wrong; the message never contains the password.
Result<RemoteSpec> parse_remote_url(std::string_view url);

}  // namespace kcache::remote
