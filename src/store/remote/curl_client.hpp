// store/remote/curl_client.hpp: HTTP requests on a dlopened libcurl, shared
// by the HTTP (http_backend.hpp) and S3 (s3_backend.hpp) remotes.
//
// libcurl is loaded with dlopen the first time a request is made, so a
// kcache process that never talks HTTP maps neither libcurl nor the TLS
// libraries behind it (docs/performance.md, "Process start").
//
// Every request ends by its deadline (resolve, connect, TLS, request, every
// byte of the reply), whatever the server does; no redirect is followed. The
// body of a 2xx answer is held up to `max_bytes`: an answer that announces
// more (Content-Length) is refused before any byte of its body, one that
// sends more is cut as soon as it passes the bound (nothing past it is held).
// The body of any other answer (an error page) keeps its first 4 KiB. A
// request may instead hand a 2xx body to a sink as it arrives, and read an
// upload from a source in parts (large objects: memory stays flat).
//
// Thread-safety: thread-safe; each request uses its own curl handle from a pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "store/remote/remote_backend.hpp"

namespace kcache::remote {

struct CurlRequest {
  std::string_view method = "GET";  // GET, HEAD, PUT (body uploaded), POST (body sent), DELETE
  std::string url;
  std::string_view body;               // PUT, POST
  std::uint64_t max_bytes = 4096;      // the bound on a 2xx answer's body
  std::vector<std::string> headers;    // "Name: value"
  std::string userpwd;                 // basic credentials, or the AWS key pair with aws_sigv4
  bool basic_auth = false;             // userpwd is sent as HTTP basic
  std::string aws_sigv4;               // "aws:amz:REGION:s3": sign with AWS Signature Version 4
  // PUT: the body is read from here in parts (instead of `body`); its size is sent as Content-Length.
  ObjectSource* upload = nullptr;
  // GET: the body of a 2xx answer goes here as it arrives (instead of
  // CurlResponse::body), still bounded by `max_bytes`.
  ObjectSink* sink = nullptr;
  // GET: only the first `max_bytes` bytes are wanted (a Range request): a
  // longer 2xx answer (a server that ignores Range) is cut there and
  // returned, not refused as an object over max_entry_size.
  bool prefix = false;
};

struct CurlResponse {
  long status = 0;
  std::string body;
  std::string server;  // the Server header
  std::string etag;    // the ETag header, quotes kept
  std::string date;           // the Date header (the server's clock)
  std::string last_modified;  // the Last-Modified header
  std::string location;       // the Location header (a redirect's target; never followed)
  bool stopped = false;  // the request's sink stopped the transfer (its bytes are the sink's to judge)
};

class CurlClient {
 public:
  using Clock = std::chrono::steady_clock;
  using Deadline = Clock::time_point;

  // `where` names the remote in messages (a masked URL); `ca_file` (empty:
  // the system's CA store) verifies TLS peers.
  CurlClient(std::string where, std::uint32_t connect_timeout_ms, std::string ca_file);
  ~CurlClient();
  CurlClient(const CurlClient&) = delete;
  CurlClient& operator=(const CurlClient&) = delete;

  // One request. Success: the answer, whatever its HTTP status. Failure:
  // timeout past `deadline`; k_object_too_large for a GET whose 2xx body is
  // over `max_bytes` (of other methods the answer is only read up to it);
  // unsupported when libcurl cannot be loaded (or lacks AWS signing, for a
  // request that asks for it); io for any other transfer failure.
  Result<CurlResponse> perform(const CurlRequest& request, Deadline deadline);

 private:
  std::string m_where;
  std::uint32_t m_connect_timeout_ms;
  std::string m_ca_file;
  std::mutex m_mutex;
  std::vector<void*> m_idle;  // CURL* handles
};

// Seconds since the epoch of an HTTP date ("Thu, 26 Nov 2026 09:25:34 GMT",
// libcurl's curl_getdate); -1 when it is not one or libcurl cannot be loaded.
std::int64_t http_date_seconds(const std::string& text);

// Percent-encodes `s` as AWS Signature Version 4 wants it: every byte but
// A-Z a-z 0-9 - _ . ~ (and '/' when `keep_slash`), with upper-case hex.
std::string uri_encode(std::string_view s, bool keep_slash);

}  // namespace kcache::remote
