// store/remote/http_backend.hpp: an HTTP object store (http://, https://) as a
// remote backend, on libcurl: the protocol ccache's http storage, Bazel's HTTP
// cache and WebDAV servers share.
//
//   object URL := scheme "://" host ":" port prefix "/" name
//   get    -> GET    (200: value, 404: miss; a body over max_bytes is refused:
//                     on its Content-Length, else as soon as it passes the bound)
//   put    -> HEAD, then PUT when absent (200/201/204: written)
//   large objects are streamed: a GET's body goes to the caller's sink as it
//   arrives, a PUT's body is read from the caller's source in parts
//   remove -> DELETE (200/204: removed, 404: none)
//
// Every operation ends within connect_timeout_ms + timeout_ms of its start
// (put: its HEAD and PUT together), whatever the server does; no redirect is
// followed.
//
// Credentials: basic from the URL's user:password, or read at each request
// from basic_auth_file / basic_auth_env ("user:password") or
// bearer_token_file / bearer_token_env; never printed. TLS verifies the peer
// with the system CA store, or with the spec's ca_file when set. There is no lease on HTTP remotes.
//
// Thread-safety: thread-safe; each call uses its own curl handle from a pool
// (curl_client.hpp, shared with the S3 backend).
#pragma once

#include "store/remote/curl_client.hpp"
#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

class HttpBackend final : public RemoteBackend {
 public:
  explicit HttpBackend(RemoteSpec spec);
  ~HttpBackend() override;

  KCACHE_REMOTE_OBJECT_OVERRIDES;
  // Streamed: the body goes to (comes from) the sink (source) in parts.
  KCACHE_REMOTE_STREAM_OVERRIDES;

 private:
  // One request with this remote's credentials. Failure: as
  // CurlClient::perform, or permission_denied when a named credential cannot
  // be read; an HTTP status is a success with `status` set.
  Result<CurlResponse> request(std::string_view method, const std::string& url, std::string_view body,
                               std::uint64_t max_bytes, CurlClient::Deadline deadline, ObjectSource* upload = nullptr,
                               ObjectSink* sink = nullptr);
  // The error of a GET answered `status` (not 200 or 404).
  Error get_error(long status) const;
  CurlClient::Deadline operation_deadline() const;
  std::string object_url(std::string_view name) const;

  RemoteSpec m_spec;
  std::string m_base;  // scheme://host:port/prefix
  CurlClient m_client;
};

}  // namespace kcache::remote
