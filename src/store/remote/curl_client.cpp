#include "store/remote/curl_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <new>
#include <optional>

#include <fmt/format.h>

#include "store/remote/remote_backend.hpp"
#include "util/dl_symbols.hpp"

namespace kcache::remote {

namespace {

// The header only gives the types and constants; the functions come from
// the library loaded on first use.
struct CurlApi {
  CURLcode (*global_init)(long) = nullptr;
  CURL* (*easy_init)() = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  void (*easy_reset)(CURL*) = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  curl_slist* (*slist_append)(curl_slist*, const char*) = nullptr;
  void (*slist_free_all)(curl_slist*) = nullptr;
  time_t (*getdate)(const char*, const time_t*) = nullptr;
  std::string error;  // why it could not be loaded; empty when loaded
};

const CurlApi& curl_api() {
  static const CurlApi api = [] {
    CurlApi a;
    util::DlSymbols lib("libcurl.so.4", "for HTTP and S3 remotes (install Debian's libcurl4)");
    lib.resolve(a.global_init, "curl_global_init");
    lib.resolve(a.easy_init, "curl_easy_init");
    lib.resolve(a.easy_cleanup, "curl_easy_cleanup");
    lib.resolve(a.easy_reset, "curl_easy_reset");
    lib.resolve(a.easy_setopt, "curl_easy_setopt");
    lib.resolve(a.easy_perform, "curl_easy_perform");
    lib.resolve(a.easy_getinfo, "curl_easy_getinfo");
    lib.resolve(a.easy_strerror, "curl_easy_strerror");
    lib.resolve(a.slist_append, "curl_slist_append");
    lib.resolve(a.slist_free_all, "curl_slist_free_all");
    lib.resolve(a.getdate, "curl_getdate");
    a.error = lib.error();
    if (a.error.empty()) {
      a.global_init(CURL_GLOBAL_DEFAULT);
    }
    return a;
  }();
  return api;
}

struct Transfer {
  CurlResponse* resp = nullptr;
  std::uint64_t max = 0;
  bool cut = false;  // the body went over `max`: the transfer was aborted
  bool prefix = false;  // CurlRequest::prefix
  std::string_view upload;
  std::size_t sent = 0;
  ObjectSource* source = nullptr;
  std::optional<Error> source_error;
  ObjectSink* sink = nullptr;
  std::optional<std::uint64_t> length;  // the 2xx answer's Content-Length
  std::uint64_t sunk = 0;               // bytes handed to the sink
  bool sink_begun = false;
};

// A 2xx body handed to the request's sink. Returns what on_body returns.
std::size_t to_sink(Transfer* t, char* data, std::size_t len) {
  if (len > t->max || t->sunk > t->max - len) {
    t->cut = true;
    return 0;
  }
  if (!t->sink_begun) {
    t->sink_begun = true;
    if (!t->sink->begin(t->length)) {
      t->resp->stopped = true;
      return 0;
    }
  }
  t->sunk += len;
  if (!t->sink->write(std::string_view(data, len))) {
    t->resp->stopped = true;
    return 0;
  }
  return len;
}

// The value of header `line` when it is named `name` (case-insensitive),
// without surrounding blanks and the line end.
bool header_value(std::string_view line, std::string_view name, std::string_view& value) {
  if (line.size() <= name.size() || line[name.size()] != ':') {
    return false;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != std::tolower(static_cast<unsigned char>(name[i]))) {
      return false;
    }
  }
  value = line.substr(name.size() + 1);
  while (!value.empty() && value.front() == ' ') {
    value.remove_prefix(1);
  }
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  return true;
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string& body = t->resp->body;
  const std::size_t len = size * n;
  if (t->resp->status / 100 != 2) {
    // An error page (404, 401 ...) or a redirect's body: never an object, and
    // never refused as one; the first 4 KiB are kept for the message.
    constexpr std::size_t k_error_body = 4096;
    if (body.size() < k_error_body) {
      body.append(data, std::min(len, k_error_body - body.size()));
    }
    return len;
  }
  if (t->sink != nullptr) {
    return to_sink(t, data, len);
  }
  if (len > t->max || body.size() > t->max - len) {
    if (t->prefix) {
      // A prefix was asked for and the server sends more: keep the prefix, stop there.
      body.append(data, static_cast<std::size_t>(t->max - body.size()));
      t->cut = true;
      return 0;
    }
    // Past the bound (no Content-Length, chunked, or a lying one): abort
    // before buffering more; what was held is freed.
    t->cut = true;
    std::string().swap(body);
    return 0;
  }
  if (body.size() + len > body.capacity()) {
    // Without a Content-Length (or past a lying one): reserve the whole bound
    // once. Only the pages written become resident, so the process holds what
    // arrived and never a growing copy beside it (doubling would hold up to
    // 1.5x the bound while it copies).
    // Past 1 GiB (a bound set that high), it doubles from there.
    constexpr std::uint64_t k_one_reserve = std::uint64_t{1} << 30;
    const std::uint64_t want = std::max<std::uint64_t>(std::min(t->max, k_one_reserve), 2 * body.capacity());
    try {
      body.reserve(static_cast<std::size_t>(std::min(want, t->max)));
    } catch (const std::bad_alloc&) {
      t->cut = true;  // no memory for it: refused like an object over the bound
      std::string().swap(body);
      return 0;
    }
  }
  body.append(data, len);
  return len;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (line.size() > 9 && line.substr(0, 5) == "HTTP/") {
    // A status line starts each response (of each redirect, and a 100 Continue).
    const auto sp = line.find(' ');
    long code = 0;
    if (sp != std::string_view::npos) {
      std::from_chars(line.data() + sp + 1, line.data() + line.size(), code);
    }
    t->resp->status = code;
    t->resp->body.clear();
    t->length.reset();
    return size * n;
  }
  std::string_view v;
  if (header_value(line, "Content-Length", v)) {
    std::uint64_t length = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
    (void)end;
    if (ec == std::errc() && t->resp->status / 100 == 2 && length > t->max && !t->prefix) {
      // An object over the bound, refused on its announced size before any
      // byte of its body (returning less than the line aborts the transfer).
      t->cut = true;
      return 0;
    }
    if (ec == std::errc() && t->resp->status / 100 == 2) {
      t->length = length;
    }
    if (ec == std::errc() && t->resp->status / 100 == 2 && t->resp->body.empty() && t->sink == nullptr) {
      t->resp->body.reserve(static_cast<std::size_t>(length));
    }
  } else if (header_value(line, "Server", v)) {
    t->resp->server = std::string(v);
  } else if (header_value(line, "ETag", v)) {
    t->resp->etag = std::string(v);
  } else if (header_value(line, "Date", v)) {
    t->resp->date = std::string(v);
  } else if (header_value(line, "Last-Modified", v)) {
    t->resp->last_modified = std::string(v);
  } else if (header_value(line, "Location", v)) {
    t->resp->location = std::string(v);
  }
  return size * n;
}

std::size_t on_upload(char* out, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (t->source != nullptr) {
    auto got = t->source->read(out, size * n);
    if (!got) {
      t->source_error = got.error();
      return CURL_READFUNC_ABORT;
    }
    return *got;
  }
  const std::size_t len = std::min(size * n, t->upload.size() - t->sent);
  std::memcpy(out, t->upload.data() + t->sent, len);
  t->sent += len;
  return len;
}

}  // namespace

std::int64_t http_date_seconds(const std::string& text) {
  const CurlApi& api = curl_api();
  if (!api.error.empty() || text.empty()) {
    return -1;
  }
  return static_cast<std::int64_t>(api.getdate(text.c_str(), nullptr));
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || u == '-' || u == '_' ||
        u == '.' || u == '~' || (keep_slash && u == '/')) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

CurlClient::CurlClient(std::string where, std::uint32_t connect_timeout_ms, std::string ca_file)
    : m_where(std::move(where)), m_connect_timeout_ms(connect_timeout_ms), m_ca_file(std::move(ca_file)) {}

CurlClient::~CurlClient() {
  for (void* h : m_idle) {
    curl_api().easy_cleanup(static_cast<CURL*>(h));
  }
}

Result<CurlResponse> CurlClient::perform(const CurlRequest& req, Deadline deadline) {
  const std::string_view method = req.method;
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left_ms <= 0) {
    return make_error(ErrorCode::timeout,
                      fmt::format("{} on {}: the operation's deadline passed (raise timeout_ms or check the server)",
                                  method, m_where));
  }
  const CurlApi& api = curl_api();
  if (!api.error.empty()) {
    return make_error(ErrorCode::unsupported, api.error);
  }
  CURL* h = nullptr;
  {
    std::lock_guard lock(m_mutex);
    if (!m_idle.empty()) {
      h = static_cast<CURL*>(m_idle.back());
      m_idle.pop_back();
    }
  }
  if (h == nullptr) {
    h = api.easy_init();
    if (h == nullptr) {
      return make_error(ErrorCode::io, "curl_easy_init failed");
    }
  }
  api.easy_reset(h);
  CurlResponse resp;
  Transfer t;
  t.resp = &resp;
  t.max = req.max_bytes;
  t.upload = req.body;
  t.source = req.upload;
  t.sink = req.sink;
  t.prefix = req.prefix;
  curl_slist* headers = nullptr;
  for (const std::string& line : req.headers) {
    headers = api.slist_append(headers, line.c_str());
  }
  if (!req.aws_sigv4.empty()) {
    if (api.easy_setopt(h, CURLOPT_AWS_SIGV4, req.aws_sigv4.c_str()) != CURLE_OK) {
      api.slist_free_all(headers);
      std::lock_guard lock(m_mutex);
      m_idle.push_back(h);
      return make_error(ErrorCode::unsupported,
                        fmt::format("{}: the libcurl loaded cannot sign requests with AWS Signature Version 4 "
                                    "(it needs libcurl 7.75 or later; install a newer libcurl4)",
                                    m_where));
    }
  }
  if (!req.userpwd.empty()) {
    if (req.basic_auth) {
      api.easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    }
    api.easy_setopt(h, CURLOPT_USERPWD, req.userpwd.c_str());
  }
  api.easy_setopt(h, CURLOPT_URL, req.url.c_str());
  api.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // The whole transfer (resolve, connect, TLS, request, every byte of the
  // reply) ends by the operation's deadline; curl follows no redirect.
  api.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                  static_cast<long>(std::min<long long>(m_connect_timeout_ms, left_ms)));
  api.easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
  if (!m_ca_file.empty()) {
    api.easy_setopt(h, CURLOPT_CAINFO, m_ca_file.c_str());
  }
  // Read in 128 KiB steps, as the curl command does (100 KiB), not libcurl's
  // default 16 KiB: fewer callbacks and system calls for a large object.
  api.easy_setopt(h, CURLOPT_BUFFERSIZE, 128L * 1024);
  api.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  api.easy_setopt(h, CURLOPT_WRITEDATA, &t);
  api.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  api.easy_setopt(h, CURLOPT_HEADERDATA, &t);
  api.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  const std::string custom(method);
  // No "Expect: 100-continue" round trip, except on signed requests: libcurl
  // (7.88) signs an empty "Expect:" header that it then does not send, so
  // the server's signature would differ; curl's own Expect is not signed.
  const char* const no_expect = "Expect:";
  if (method == "HEAD") {
    api.easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    api.easy_setopt(h, CURLOPT_UPLOAD, 1L);
    api.easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
    api.easy_setopt(h, CURLOPT_READDATA, &t);
    api.easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                    static_cast<curl_off_t>(req.upload != nullptr ? req.upload->size() : req.body.size()));
    headers = api.slist_append(headers, "Content-Type: application/octet-stream");
    if (req.aws_sigv4.empty()) {
      headers = api.slist_append(headers, no_expect);
    }
  } else if (method == "POST") {
    api.easy_setopt(h, CURLOPT_POST, 1L);
    api.easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    api.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    if (req.aws_sigv4.empty()) {
      headers = api.slist_append(headers, no_expect);
    }
  } else if (method != "GET") {
    api.easy_setopt(h, CURLOPT_CUSTOMREQUEST, custom.c_str());
  }
  // A GET's Content-Length over the bound is refused in on_header, before any
  // byte of the body (curl's CURLOPT_MAXFILESIZE would refuse an error page
  // over it too).
  if (headers != nullptr) {
    api.easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  }
  const CURLcode rc = api.easy_perform(h);
  api.slist_free_all(headers);
  api.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  {
    std::lock_guard lock(m_mutex);
    m_idle.push_back(h);
  }
  if (t.source_error) {
    return tl::unexpected(*t.source_error);
  }
  if (rc == CURLE_WRITE_ERROR && resp.stopped) {
    return resp;  // the sink stopped it: what it got is its to judge
  }
  const bool too_large = (rc == CURLE_WRITE_ERROR && t.cut) || rc == CURLE_FILESIZE_EXCEEDED;
  if (too_large && method == "GET" && req.prefix) {
    return resp;  // the prefix asked for, from a server that sent more
  }
  if (too_large && method == "GET") {
    return make_error(k_object_too_large,
                      fmt::format("{} on {}: the object is larger than max_entry_size ({} bytes); refused without "
                                  "downloading it",
                                  method, m_where, req.max_bytes));
  }
  if (rc != CURLE_OK && !too_large) {  // another method's answer is only read up to its bound
    const ErrorCode code = rc == CURLE_OPERATION_TIMEDOUT ? ErrorCode::timeout : ErrorCode::io;
    return make_error(code, fmt::format("{} on {}: {}{}", method, m_where, api.easy_strerror(rc),
                                        code == ErrorCode::timeout
                                            ? " (no answer within the timeout; raise timeout_ms or check the server)"
                                            : ""));
  }
  return resp;
}

}  // namespace kcache::remote
