// store/remote/http_backend.hpp: an HTTP object store (http://, https://) as a
// remote backend, on libcurl: the protocol ccache's http storage, Bazel's HTTP
// cache and WebDAV servers share.
//
//   object URL := scheme "://" host ":" port prefix "/" name
//   get    -> GET    (200: value, 404: miss; a body over max_bytes is cut at max + 1)
//   put    -> HEAD, then PUT when absent (200/201/204: written)
//   remove -> DELETE (200/204: removed, 404: none)
//
// Credentials: basic from the URL's user:password, or read at each request
// from basic_auth_file / basic_auth_env ("user:password") or
// bearer_token_file / bearer_token_env; never printed. TLS uses the system
// CA store and verifies the peer. There is no lease on HTTP remotes.
//
// Thread-safety: thread-safe; each call uses its own curl handle from a pool.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

class HttpBackend final : public RemoteBackend {
 public:
  explicit HttpBackend(RemoteSpec spec);
  ~HttpBackend() override;

  Result<std::optional<std::string>> get(std::string_view name, std::uint64_t max_bytes) override;
  Result<bool> put(std::string_view name, std::string_view value, std::uint64_t ttl_s) override;
  Result<bool> remove(std::string_view name) override;
  Result<std::string> describe() override;

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string server;  // the Server header
    bool cut = false;    // the body went over the limit
  };
  // One request. Failure: the transfer failed (connect, timeout, TLS); an HTTP
  // status is a success with `status` set.
  Result<Response> request(std::string_view method, const std::string& url, std::string_view body,
                           std::uint64_t max_bytes);
  std::string object_url(std::string_view name) const;

  RemoteSpec m_spec;
  std::string m_base;  // scheme://host:port/prefix
  std::mutex m_mutex;
  std::vector<void*> m_idle;  // CURL* handles
};

}  // namespace kcache::remote
