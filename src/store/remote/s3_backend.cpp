#include "store/remote/s3_backend.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <mutex>
#include <vector>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

constexpr std::uint64_t k_small_answer = 64 * 1024;       // an error page, an XML result
constexpr std::uint64_t k_list_answer = 8 * 1024 * 1024;  // one ListObjectsV2 page (1000 keys)
constexpr std::string_view k_lease_magic = "kcache-lease 1";

// The text of the first <tag>...</tag> in `xml` at or after `from`, XML
// entities decoded; std::nullopt when there is none. `from` moves past it.
std::optional<std::string> xml_text(std::string_view xml, std::string_view tag, std::size_t* from = nullptr) {
  const std::string open = fmt::format("<{}>", tag);
  const std::string close = fmt::format("</{}>", tag);
  const std::size_t start = from != nullptr ? *from : 0;
  const auto a = xml.find(open, start);
  if (a == std::string_view::npos) {
    return std::nullopt;
  }
  const auto b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) {
    return std::nullopt;
  }
  if (from != nullptr) {
    *from = b + close.size();
  }
  const std::string_view raw = xml.substr(a + open.size(), b - a - open.size());
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      out += raw[i];
      continue;
    }
    const auto semi = raw.find(';', i);
    const std::string_view ent = raw.substr(i + 1, semi == std::string_view::npos ? 0 : semi - i - 1);
    char c = 0;
    if (ent == "amp") {
      c = '&';
    } else if (ent == "lt") {
      c = '<';
    } else if (ent == "gt") {
      c = '>';
    } else if (ent == "quot") {
      c = '"';
    } else if (ent == "apos") {
      c = '\'';
    } else if (ent.size() > 1 && ent[0] == '#') {
      unsigned v = 0;
      const bool hex = ent[1] == 'x';
      std::from_chars(ent.data() + (hex ? 2 : 1), ent.data() + ent.size(), v, hex ? 16 : 10);
      c = static_cast<char>(v);
    }
    if (c == 0) {
      out += raw[i];
      continue;
    }
    out += c;
    i = semi;
  }
  return out;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct S3Backend::Lease {
  std::string token;                   // the owner's token, or the whole body when it is not kcache's
  std::optional<std::int64_t> expires;  // Unix ms (this host's clock); absent: not a kcache lease (foreign)
  std::int64_t ttl_ms = 0;              // as written (0: not given)
  std::string etag;
};

S3Backend::S3Backend(RemoteSpec spec)
    : m_spec(std::move(spec)),
      m_where(m_spec.masked()),
      m_client(m_where, m_spec.connect_timeout_ms, m_spec.ca_file) {}

S3Backend::~S3Backend() = default;

const S3Backend::Resolved& S3Backend::resolved() const {
  std::call_once(m_resolve_once, [this] {
    Resolved r{resolve_s3_credentials(m_spec), {}, false};
    const std::string region = r.credentials ? r.credentials->region : std::string("us-east-1");
    r.scheme_host = m_spec.endpoint.empty() ? fmt::format("https://s3.{}.amazonaws.com", region) : m_spec.endpoint;
    r.virtual_host = m_spec.addressing == S3Addressing::virtual_host ||
                     (m_spec.addressing == S3Addressing::automatic && m_spec.endpoint.empty());
    if (r.virtual_host) {
      const auto at = r.scheme_host.find("://") + 3;
      r.scheme_host.insert(at, m_spec.host + ".");
    }
    m_resolved.emplace(std::move(r));
  });
  return *m_resolved;
}

std::string S3Backend::object_key(std::string_view name) const {
  std::string key = m_spec.path.empty() ? std::string() : m_spec.path.substr(1) + "/";
  for (const char c : name) {
    key += c == ':' ? '/' : c;
  }
  return key;
}

S3Backend::Deadline S3Backend::operation_deadline() const {
  return CurlClient::Clock::now() +
         std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} + m_spec.timeout_ms);
}

Result<CurlResponse> S3Backend::send(std::string_view method, std::string_view key, const std::string& query,
                                     std::string_view body, std::uint64_t max_bytes,
                                     std::vector<std::string> headers, Deadline deadline, ObjectSource* upload,
                                     ObjectSink* sink) {
  const Resolved& where = resolved();
  if (!where.credentials) {
    return tl::unexpected(where.credentials.error());
  }
  const S3Credentials& c = *where.credentials;
  CurlRequest req;
  req.method = method;
  req.url = where.scheme_host + (where.virtual_host ? "/" : "/" + m_spec.host + (key.empty() ? "" : "/")) +
            uri_encode(key, true) + (query.empty() ? "" : "?" + query);
  req.body = body;
  req.upload = upload;
  req.sink = sink;
  req.max_bytes = max_bytes;
  req.headers = std::move(headers);
  // A Range read wants its first max_bytes bytes: a server that ignores the Range sends more.
  req.prefix = std::any_of(req.headers.begin(), req.headers.end(),
                           [](const std::string& h) { return h.rfind("Range: ", 0) == 0; });
  // The payload is not hashed into the signature (a 300 MB engine would be
  // read twice): kcache verifies every object by its own digest and signature.
  req.headers.emplace_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!c.anonymous()) {
    req.aws_sigv4 = "aws:amz:" + c.region + ":s3";
    req.userpwd = c.access_key + ":" + c.secret_key;
    if (!c.session_token.empty()) {
      req.headers.push_back("x-amz-security-token: " + c.session_token);
    }
  }
  return m_client.perform(req, deadline);
}

Error S3Backend::answer_error(std::string_view what, const CurlResponse& r) const {
  const std::string code = xml_text(r.body, "Code").value_or("");
  const std::string message = xml_text(r.body, "Message").value_or("");
  const std::string said = code.empty() ? fmt::format("HTTP {}", r.status)
                                        : fmt::format("HTTP {} {}: {}", r.status, code, message);
  const Resolved& where = resolved();
  const std::string who = where.credentials ? where.credentials->describe() : std::string("no credentials");
  // A request signed more than 15 minutes off the server's clock is refused
  // (403 RequestTimeTooSkewed, or a bare 403 from some stores): the answer's
  // Date tells a skewed clock apart from refused credentials.
  const std::int64_t server_s = r.date.empty() ? -1 : http_date_seconds(r.date);
  const std::int64_t local_s = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  const std::int64_t skew_s = server_s < 0 ? 0 : server_s - local_s;
  if ((r.status == 401 || r.status == 403) && (code == "RequestTimeTooSkewed" || skew_s > 600 || skew_s < -600)) {
    return Error{ErrorCode::io,
                 fmt::format("{} on {} was refused ({}): this host's clock is {} s {} the server's (its Date: {}); S3 "
                             "refuses requests signed more than 15 minutes off its clock. Set this host's clock "
                             "(NTP): it is not the credentials",
                             what, m_where, said, skew_s < 0 ? -skew_s : skew_s, skew_s < 0 ? "ahead of" : "behind",
                             r.date.empty() ? std::string("none") : r.date),
                 {}};
  }
  if (r.status == 401 || r.status == 403) {
    return Error{ErrorCode::permission_denied,
                 fmt::format("{} on {} was refused ({}); the credentials used: {}. Check AWS_ACCESS_KEY_ID / "
                             "AWS_SECRET_ACCESS_KEY or the profile, and that they may use this bucket",
                             what, m_where, said, who),
                 {}};
  }
  if (r.status == 404 && (code == "NoSuchBucket" || code.empty())) {
    return Error{ErrorCode::not_found,
                 fmt::format("{} on {}: the bucket '{}' does not exist at {} ({}); create it, or check the "
                             "bucket name, endpoint and region",
                             what, m_where, m_spec.host, where.scheme_host, said),
                 {}};
  }
  // A redirect: to the same service in another region (the region is wrong), or to another host
  // (a proxy, a load balancer, a temporary redirect): kcache follows none, and says which.
  const std::string region_hint = xml_text(r.body, "Region").value_or("");
  const std::string target = r.location.empty() ? xml_text(r.body, "Endpoint").value_or("") : r.location;
  const bool other_region = code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
                            !region_hint.empty() || target.find(".amazonaws.com") != std::string::npos;
  if ((r.status == 301 || r.status == 307 || r.status == 302 || r.status == 308 || code == "PermanentRedirect" ||
       code == "AuthorizationHeaderMalformed") &&
      other_region) {
    return Error{ErrorCode::io,
                 fmt::format("{} on {}: {}; the bucket is in another region{}: set ?region= on the URL", what, m_where,
                             said, region_hint.empty() ? std::string() : " (" + region_hint + ")"),
                 {}};
  }
  if (r.status == 301 || r.status == 302 || r.status == 307 || r.status == 308) {
    return Error{ErrorCode::io,
                 fmt::format("{} on {}: {}: the server redirects to {}, and kcache follows no redirect (a signed "
                             "request must go where it was signed for): set the endpoint (?endpoint=) to the host "
                             "that serves the bucket, or fix the proxy or load balancer in between",
                             what, m_where, said, target.empty() ? std::string("an unnamed location") : target),
                 {}};
  }
  if (r.status == 507 || code == "EntityTooLarge" || code == "QuotaExceeded") {
    return Error{ErrorCode::no_space, fmt::format("{} on {}: {}", what, m_where, said), {}};
  }
  return Error{ErrorCode::io, fmt::format("{} on {}: {}", what, m_where, said), {}};
}

Result<std::optional<std::string>> S3Backend::get(std::string_view name, std::uint64_t max_bytes) {
  auto r = send("GET", object_key(name), {}, {}, max_bytes, {}, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404 && xml_text(r->body, "Code").value_or("") != "NoSuchBucket") {
    return std::optional<std::string>{};
  }
  if (r->status != 200) {
    return tl::unexpected(answer_error("GET", *r));
  }
  if (r->body.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->body));
}

Result<bool> S3Backend::get_stream(std::string_view name, std::uint64_t max_bytes, ObjectSink& sink) {
  auto r = send("GET", object_key(name), {}, {}, max_bytes, {}, operation_deadline(), nullptr, &sink);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404 && xml_text(r->body, "Code").value_or("") != "NoSuchBucket") {
    return false;
  }
  if (r->status != 200) {
    return tl::unexpected(answer_error("GET", *r));
  }
  return true;
}

Result<std::optional<std::string>> S3Backend::get_prefix(std::string_view name, std::uint64_t bytes) {
  if (bytes == 0) {
    return std::optional<std::string>(std::string());
  }
  auto r = send("GET", object_key(name), {}, {}, bytes, {fmt::format("Range: bytes=0-{}", bytes - 1)},
                operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404 && xml_text(r->body, "Code").value_or("") != "NoSuchBucket") {
    return std::optional<std::string>{};
  }
  if (r->status != 200 && r->status != 206) {
    return tl::unexpected(answer_error("GET", *r));
  }
  return std::optional<std::string>(std::move(r->body));
}

Result<bool> S3Backend::put(std::string_view name, std::string_view value, std::uint64_t ttl_s) {
  ViewSource source(value);
  return put_stream(name, source, ttl_s);
}

namespace {

// The next `size` bytes of another source: one part of a multipart upload,
// read from the object's source as it is sent (never held whole).
class PartSource final : public ObjectSource {
 public:
  PartSource(ObjectSource& whole, std::uint64_t size) noexcept : m_whole(whole), m_size(size) {}
  std::uint64_t size() const noexcept override { return m_size; }
  Result<std::size_t> read(char* out, std::size_t n) override {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, m_size - m_at));
    std::size_t got = 0;
    while (got < want) {  // whole chunks, so a part ends exactly at its size
      auto k = m_whole.read(out + got, want - got);
      if (!k) {
        return tl::unexpected(k.error());
      }
      if (*k == 0) {
        return make_error(ErrorCode::io, "the object to upload ended early");
      }
      got += *k;
    }
    m_at += got;
    return got;
  }
  Result<void> rewind() override {
    return make_error(ErrorCode::unsupported, "a part of a multipart upload is not sent twice");
  }

 private:
  ObjectSource& m_whole;
  std::uint64_t m_size;
  std::uint64_t m_at = 0;
};

}  // namespace

Result<bool> S3Backend::put_stream(std::string_view name, ObjectSource& source, std::uint64_t ttl_s) {
  const std::string key = object_key(name);
  std::vector<std::string> headers;
  if (ttl_s > 0) {
    // S3 has no per-object expiry: a tag that a bucket lifecycle rule can
    // match (docs/remote-format.md, "S3").
    headers.push_back(fmt::format("x-amz-tagging: kcache-ttl-s={}", ttl_s));
  }
  if (source.size() >= m_spec.multipart_size) {
    return put_multipart(key, source, std::move(headers));
  }
  const Deadline deadline = operation_deadline();
  if (m_no_conditional_put.load()) {
    auto head = send("HEAD", key, {}, {}, 0, {}, deadline);
    if (!head) {
      return tl::unexpected(head.error());
    }
    if (head->status == 200) {
      return false;
    }
  } else {
    headers.emplace_back("If-None-Match: *");
  }
  auto r = send("PUT", key, {}, {}, k_small_answer, headers, deadline, &source);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 200 || r->status == 201 || r->status == 204) {
    return true;
  }
  if (r->status == 412 || r->status == 409) {
    return false;  // there already (409: another writer's conditional PUT of the same key is under way)
  }
  if (r->status == 501 && !m_no_conditional_put.exchange(true)) {
    // This store has no conditional writes: HEAD, then PUT.
    if (auto again = source.rewind(); !again) {
      return tl::unexpected(again.error());
    }
    return put_stream(name, source, ttl_s);
  }
  return tl::unexpected(answer_error("PUT", *r));
}

Result<bool> S3Backend::put_multipart(const std::string& key, ObjectSource& source, std::vector<std::string> headers) {
  // Not uploaded at all when it is there (a large engine is worth a HEAD).
  auto head = send("HEAD", key, {}, {}, 0, {}, operation_deadline());
  if (!head) {
    return tl::unexpected(head.error());
  }
  if (head->status == 200) {
    return false;
  }
  auto started = send("POST", key, "uploads=", {}, k_small_answer, headers, operation_deadline());
  if (!started) {
    return tl::unexpected(started.error());
  }
  const std::optional<std::string> id = xml_text(started->body, "UploadId");
  if (started->status != 200 || !id) {
    return tl::unexpected(answer_error("CreateMultipartUpload", *started));
  }
  const std::string upload = "uploadId=" + uri_encode(*id, false);
  auto abort = [&](Error e) -> Result<bool> {
    (void)send("DELETE", key, upload, {}, k_small_answer, {}, operation_deadline());
    return tl::unexpected(std::move(e));
  };
  std::string complete = "<CompleteMultipartUpload>";
  const std::uint64_t part_size = m_spec.multipart_size;
  const std::uint64_t total = source.size();
  for (std::uint64_t at = 0, n = 1; at < total; at += part_size, ++n) {
    PartSource part(source, std::min(part_size, total - at));
    auto r = send("PUT", key, fmt::format("partNumber={}&{}", n, upload), {}, k_small_answer, {},
                  operation_deadline(), &part);
    if (!r) {
      return abort(r.error());
    }
    if (r->status != 200 || r->etag.empty()) {
      return abort(answer_error(fmt::format("UploadPart {}", n), *r));
    }
    complete += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", n, r->etag);
  }
  complete += "</CompleteMultipartUpload>";
  std::vector<std::string> condition;
  if (!m_no_conditional_put.load()) {
    condition.emplace_back("If-None-Match: *");
  }
  auto r = send("POST", key, upload, complete, k_small_answer, condition, operation_deadline());
  if (!r) {
    return abort(r.error());
  }
  if (r->status == 412 || r->status == 409) {
    (void)abort(Error{});
    return false;
  }
  // S3 may answer 200 with an <Error> body to CompleteMultipartUpload.
  if (r->status != 200 || r->body.find("<Error>") != std::string::npos) {
    return abort(answer_error("CompleteMultipartUpload", *r));
  }
  return true;
}

Result<bool> S3Backend::remove(std::string_view name) {
  const std::string key = object_key(name);
  const Deadline deadline = operation_deadline();
  auto head = send("HEAD", key, {}, {}, 0, {}, deadline);
  if (!head) {
    return tl::unexpected(head.error());
  }
  if (head->status == 404) {
    return false;
  }
  if (head->status != 200) {
    return tl::unexpected(answer_error("HEAD", *head));
  }
  auto r = send("DELETE", key, {}, {}, k_small_answer, {}, deadline);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 200 || r->status == 204) {
    return true;
  }
  return tl::unexpected(answer_error("DELETE", *r));
}

Result<std::string> S3Backend::describe() {
  auto r = send("HEAD", {}, {}, {}, 0, {}, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status != 200) {
    return tl::unexpected(answer_error("HEAD bucket", *r));
  }
  return fmt::format("s3 bucket {} at {} ({}; {})", m_spec.host, resolved().scheme_host,
                     r->server.empty() ? "no Server header" : r->server, resolved().credentials->describe());
}

Result<void> S3Backend::list(std::string_view prefix, const std::function<bool(std::string_view name)>& each) {
  const std::string key_prefix = object_key(prefix);
  const std::size_t strip = m_spec.path.empty() ? 0 : m_spec.path.size();  // "<prefix>/"
  std::string token;
  while (true) {
    const std::string query =
        (token.empty() ? std::string() : "continuation-token=" + uri_encode(token, false) + "&") +
        "list-type=2&prefix=" + uri_encode(key_prefix, false);
    auto r = send("GET", {}, query, {}, k_list_answer, {}, operation_deadline());
    if (!r) {
      return tl::unexpected(r.error());
    }
    if (r->status != 200) {
      return tl::unexpected(answer_error("ListObjectsV2", *r));
    }
    std::size_t at = 0;
    while (auto key = xml_text(r->body, "Key", &at)) {
      if (key->size() < strip) {
        continue;
      }
      std::string name = key->substr(strip);
      std::replace(name.begin(), name.end(), '/', ':');
      if (!each(name)) {
        return {};
      }
    }
    const auto next = xml_text(r->body, "NextContinuationToken");
    if (xml_text(r->body, "IsTruncated").value_or("false") != "true" || !next || next->empty()) {
      return {};
    }
    token = *next;
  }
}

Result<bool> S3Backend::exists(std::string_view name) {
  auto r = send("HEAD", object_key(name), {}, {}, 0, {}, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 200 || r->status == 404) {
    return r->status == 200;
  }
  return tl::unexpected(answer_error("HEAD", *r));
}

Result<std::optional<S3Backend::Lease>> S3Backend::read_lease(std::string_view name, Deadline deadline) {
  auto r = send("GET", object_key(name), {}, {}, 4096, {}, deadline);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404 && xml_text(r->body, "Code").value_or("") != "NoSuchBucket") {
    return std::optional<Lease>{};
  }
  if (r->status != 200) {
    return tl::unexpected(answer_error("GET lease", *r));
  }
  Lease lease;
  lease.etag = r->etag;
  lease.token = r->body;
  // "kcache-lease 1\n<token>\n<expires>\n<ttl_ms>\n"
  std::vector<std::string_view> lines;
  for (std::string_view rest = r->body; !rest.empty();) {
    const auto nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  const auto number = [](std::string_view text, std::int64_t& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  };
  std::int64_t expires = 0, ttl_ms = 0;
  if (lines.size() >= 3 && lines[0] == k_lease_magic && number(lines[2], expires)) {
    lease.token = std::string(lines[1]);
    lease.expires = expires;
    // Judged by the server's clock where it says its time and the object's
    // (Date, Last-Modified; whole seconds): the lease has lived age_ms of its
    // ttl_ms, plus 1 s for the rounding, so hosts whose clocks disagree still
    // agree on when it lapses.
    const std::int64_t now_s = http_date_seconds(r->date);
    const std::int64_t written_s = http_date_seconds(r->last_modified);
    if (lines.size() >= 4 && number(lines[3], ttl_ms)) {
      lease.ttl_ms = ttl_ms;
      if (now_s > 0 && written_s > 0 && now_s >= written_s) {
        lease.expires = now_unix_ms() + ttl_ms + 1000 - (now_s - written_s) * 1000;
      }
    }
  }
  return std::optional<Lease>(std::move(lease));
}

Result<bool> S3Backend::write_lease(std::string_view name, std::string_view token, std::uint64_t ttl_ms,
                                    const std::string& condition, Deadline deadline) {
  const std::string body = fmt::format("{}\n{}\n{}\n{}\n", k_lease_magic, token,
                                      now_unix_ms() + static_cast<std::int64_t>(ttl_ms), ttl_ms);
  auto r = send("PUT", object_key(name), {}, body, k_small_answer, {condition}, deadline);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 200 || r->status == 201 || r->status == 204) {
    return true;
  }
  if (r->status == 412 || r->status == 409) {
    return false;
  }
  if (r->status == 501) {
    return make_error(ErrorCode::unsupported,
                      fmt::format("{} does not support conditional writes ({}), so it takes no leases: each host "
                                  "compiles a cold key itself (docs/remote-format.md, \"S3\")",
                                  m_where, condition));
  }
  return tl::unexpected(answer_error("PUT lease", *r));
}

Result<bool> S3Backend::lease_take(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  const Deadline deadline = operation_deadline();
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto created = write_lease(name, token, ttl_ms, "If-None-Match: *", deadline);
    if (!created) {
      return created;
    }
    if (*created) {
      // Some S3-compatible servers check If-None-Match and write in two steps,
      // so two hosts racing for one lease can both be told they created it; the
      // object then holds the last writer's token. Read it back: only the host
      // whose token it holds owns the lease (a failed read keeps the write's word).
      auto mine = read_lease(name, deadline);
      return !(mine && *mine && (*mine)->token != token);
    }
    auto held = read_lease(name, deadline);
    if (!held) {
      return tl::unexpected(held.error());
    }
    if (!*held) {
      continue;  // released between the two: create it again, once
    }
    if ((*held)->expires && now_unix_ms() >= *(*held)->expires) {
      // Expired (its owner died or stalled): replace exactly the object read.
      return write_lease(name, token, ttl_ms, "If-Match: " + (*held)->etag, deadline);
    }
    return false;
  }
  return false;
}

Result<std::optional<S3Backend::Lease>> S3Backend::read_lease_of(std::string_view name, std::string_view token,
                                                                 Deadline deadline) {
  auto held = read_lease(name, deadline);
  if (held && *held && (*held)->token != token) {
    return std::optional<Lease>{};
  }
  return held;
}

Result<bool> S3Backend::lease_renew(std::string_view name, std::string_view token, std::uint64_t ttl_ms) {
  const Deadline deadline = operation_deadline();
  auto held = read_lease_of(name, token, deadline);
  if (!held || !*held) {
    return held.map([](const auto&) { return false; });
  }
  return write_lease(name, token, ttl_ms, "If-Match: " + (*held)->etag, deadline);
}

Result<bool> S3Backend::lease_release(std::string_view name, std::string_view token) {
  const Deadline deadline = operation_deadline();
  auto held = read_lease_of(name, token, deadline);
  if (!held || !*held) {
    return held.map([](const auto&) { return false; });
  }
  auto r = send("DELETE", object_key(name), {}, {}, k_small_answer, {"If-Match: " + (*held)->etag}, deadline);
  if (r && r->status == 501) {
    // No conditional DELETE here: the owner check above is the only one (a
    // successor that took over in between loses its lease early; it then
    // compiles once more, never publishes other bytes).
    r = send("DELETE", object_key(name), {}, {}, k_small_answer, {}, deadline);
  }
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 412) {
    return false;
  }
  if (r->status != 200 && r->status != 204) {
    return tl::unexpected(answer_error("DELETE lease", *r));
  }
  return true;
}

Result<std::optional<LeaseInfo>> S3Backend::lease_inspect(std::string_view name) {
  auto held = read_lease(name, operation_deadline());
  if (!held) {
    return tl::unexpected(held.error());
  }
  if (!*held) {
    return std::optional<LeaseInfo>{};
  }
  LeaseInfo info;
  info.value = (*held)->token;
  if (!(*held)->expires) {
    info.pttl_ms = -1;  // not kcache's: no expiry
    return std::optional<LeaseInfo>(std::move(info));
  }
  info.pttl_ms = *(*held)->expires - now_unix_ms();
  if ((*held)->ttl_ms > 0) {
    // Never longer than it was written for (the 1 s rounding margin aside):
    // a lease kcache writes is never taken for a foreign one.
    info.pttl_ms = std::min(info.pttl_ms, (*held)->ttl_ms);
  }
  if (info.pttl_ms <= 0) {
    return std::optional<LeaseInfo>{};  // expired: as good as gone (the next take replaces it)
  }
  return std::optional<LeaseInfo>(std::move(info));
}

Result<bool> S3Backend::lease_take_foreign(std::string_view name, std::string_view seen, std::string_view token,
                                           std::uint64_t ttl_ms) {
  const Deadline deadline = operation_deadline();
  auto held = read_lease_of(name, seen, deadline);
  if (!held || !*held) {
    return held.map([](const auto&) { return false; });
  }
  if ((*held)->expires &&
      ((*held)->ttl_ms > 0 || *(*held)->expires - now_unix_ms() <= static_cast<std::int64_t>(ttl_ms))) {
    return false;  // a lease kcache writes: it expires on its own
  }
  return write_lease(name, token, ttl_ms, "If-Match: " + (*held)->etag, deadline);
}

}  // namespace kcache::remote
