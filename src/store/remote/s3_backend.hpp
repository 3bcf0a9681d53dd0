// store/remote/s3_backend.hpp: an S3-compatible object store (AWS S3, MinIO,
// Ceph RGW, SeaweedFS, Cloudflare R2, GCS's XML API) as a remote backend, on
// libcurl (curl_client.hpp) with AWS Signature Version 4 (CURLOPT_AWS_SIGV4;
// libcurl 7.75 or later). No AWS SDK.
//
//   object key := [prefix "/"] name with ':' as '/'
//                 ("kcache:v1:<key>" -> "<prefix>/kcache/v1/<key>")
//   object URL := endpoint "/" bucket "/" key    (path-style)
//               | scheme "://" bucket "." host "/" key  (virtual-hosted)
//   get    -> GET (200: value, 404 NoSuchKey: miss, 404 NoSuchBucket:
//             not_found; over max_bytes: refused on its Content-Length)
//   put    -> PUT with If-None-Match: * (200: written, 412: already there);
//             objects of multipart_size or more: CreateMultipartUpload, parts
//             of multipart_size, CompleteMultipartUpload with If-None-Match: *
//             (aborted on any failure). Where the store refuses the condition
//             (501 NotImplemented), HEAD then an unconditional PUT (a race of
//             two writers of one key leaves one of two valid objects).
//   remove -> DELETE (S3 answers 204 for an absent key too: a HEAD first
//             tells "removed" from "none")
//   list   -> ListObjectsV2 by prefix, 1000 a page
//   leases -> an object "<prefix>/kcache/v1/lease/<key>" holding
//             "kcache-lease 1\n<token>\n<expires, Unix ms>\n<ttl_ms>\n",
//             created with If-None-Match: *, renewed, taken over (when
//             expired) and released only with If-Match: <its ETag>
//             (docs/remote-format.md, "S3"). Expiry is judged by the server's
//             clock (its Date against the object's Last-Modified, + 1 s for
//             their whole seconds), else by `expires` against the reader's.
//
// Every request is signed unless the credentials are anonymous
// (s3_credentials.hpp), and carries x-amz-content-sha256: UNSIGNED-PAYLOAD
// (payloads are verified by kcache's own digest and signature instead).
// Every operation ends within connect_timeout_ms + timeout_ms of its start,
// except a multipart upload, whose every request has that bound.
//
// Thread-safety: thread-safe; each request uses its own curl handle from a pool.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>

#include "store/remote/curl_client.hpp"
#include "store/remote/remote_backend.hpp"
#include "store/remote/s3_credentials.hpp"

namespace kcache::remote {

class S3Backend final : public RemoteBackend {
 public:
  explicit S3Backend(RemoteSpec spec);
  ~S3Backend() override;

  KCACHE_REMOTE_OBJECT_OVERRIDES;
  KCACHE_REMOTE_INSPECT_OVERRIDES;
  // Streamed: a GET's body goes to the sink as it arrives; an upload is read
  // from the source in parts (each multipart part too), never held whole.
  KCACHE_REMOTE_STREAM_OVERRIDES;
  KCACHE_REMOTE_LEASE_OVERRIDES;

  // The object key of `name` in the bucket (with the prefix).
  std::string object_key(std::string_view name) const;

 private:
  struct Lease;  // a lease object as read: its token, expiry and ETag
  using Deadline = CurlClient::Deadline;

  // One request on `key` ("" for the bucket) with `query` (already encoded,
  // names in sorted order), signed with the credentials.
  Result<CurlResponse> send(std::string_view method, std::string_view key, const std::string& query,
                            std::string_view body, std::uint64_t max_bytes, std::vector<std::string> headers,
                            Deadline deadline, ObjectSource* upload = nullptr, ObjectSink* sink = nullptr);
  // The error for an answer `r` to `what` that is not a success: 403:
  // permission_denied; 404 NoSuchBucket: not_found; 507 / EntityTooLarge:
  // no_space; else io. The message names the remote, the S3 error code and
  // says what to do.
  Error answer_error(std::string_view what, const CurlResponse& r) const;
  Deadline operation_deadline() const;
  Result<bool> put_multipart(const std::string& key, ObjectSource& source, std::vector<std::string> headers);
  Result<std::optional<Lease>> read_lease(std::string_view name, Deadline deadline);
  // The lease when `token` holds it; std::nullopt when none or another does.
  Result<std::optional<Lease>> read_lease_of(std::string_view name, std::string_view token, Deadline deadline);
  // Writes a lease object for `token` expiring `ttl_ms` from now, with the
  // condition `condition` (If-None-Match: * or If-Match: <etag>). True when
  // written, false when the condition failed.
  Result<bool> write_lease(std::string_view name, std::string_view token, std::uint64_t ttl_ms,
                           const std::string& condition, Deadline deadline);

  // What the first request resolves: the credentials and region (files and
  // environment; no network) and, from the region, where requests go.
  struct Resolved {
    Result<S3Credentials> credentials;
    std::string scheme_host;  // "http(s)://host[:port]" requests go to
    bool virtual_host = false;
  };
  // Resolved once, at the first request, not when the backend is made: a
  // store that never reaches the remote (a local hit) reads no credentials
  // file (issue 23). Thread-safe.
  const Resolved& resolved() const;

  RemoteSpec m_spec;
  std::string m_where;  // masked URL
  CurlClient m_client;
  mutable std::once_flag m_resolve_once;
  mutable std::optional<Resolved> m_resolved;
  std::atomic<bool> m_no_conditional_put{false};      // the store answered 501 to If-None-Match
};

}  // namespace kcache::remote
