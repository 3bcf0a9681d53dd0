#include "store/remote/http_backend.hpp"
#include "util/dl_symbols.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

// libcurl is loaded with dlopen the first time an HTTP remote is used, so a
// kcache process that never talks HTTP maps neither libcurl nor the TLS
// libraries behind it (a cache hit stays a short process: docs/performance.md,
// "Process start"). The header only gives the types and constants.
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
  std::string error;  // why it could not be loaded; empty when loaded
};

const CurlApi& curl_api() {
  static const CurlApi api = [] {
    CurlApi a;
    util::DlSymbols lib("libcurl.so.4", "for HTTP remotes (install Debian's libcurl4)");
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
    a.error = lib.error();
    if (a.error.empty()) {
      a.global_init(CURL_GLOBAL_DEFAULT);
    }
    return a;
  }();
  return api;
}

struct Transfer {
  std::string* body = nullptr;
  std::string* server = nullptr;
  std::uint64_t max = 0;
  bool cut = false;  // the body went over `max`: the transfer was aborted
  long status = 0;   // of the response being received (each redirect's in turn)
  std::string_view upload;
  std::size_t sent = 0;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  if (t->status / 100 != 2) {
    // An error page (404, 401 ...) or a redirect's body: never an object, and
    // never refused as one; the first 4 KiB are kept for the message.
    constexpr std::size_t k_error_body = 4096;
    if (t->body->size() < k_error_body) {
      t->body->append(data, std::min(len, k_error_body - t->body->size()));
    }
    return len;
  }
  if (len > t->max || t->body->size() > t->max - len) {
    // Past the bound (no Content-Length, chunked, or a lying one): abort
    // before buffering more; what was held is freed.
    t->cut = true;
    std::string().swap(*t->body);
    return 0;
  }
  if (t->body->size() + len > t->body->capacity()) {
    // Without a Content-Length (or past a lying one): reserve the whole bound
    // once. Only the pages written become resident, so the process holds what
    // arrived and never a growing copy beside it (doubling would hold up to
    // 1.5x the bound while it copies).
    // Past 1 GiB (a bound set that high), it doubles from there.
    constexpr std::uint64_t k_one_reserve = std::uint64_t{1} << 30;
    const std::uint64_t want = std::max<std::uint64_t>(std::min(t->max, k_one_reserve), 2 * t->body->capacity());
    try {
      t->body->reserve(static_cast<std::size_t>(std::min(want, t->max)));
    } catch (const std::bad_alloc&) {
      t->cut = true;  // no memory for it: refused like an object over the bound
      std::string().swap(*t->body);
      return 0;
    }
  }
  t->body->append(data, len);
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
    t->status = code;
    t->body->clear();
    return size * n;
  }
  if (line.size() > 15 && (line.substr(0, 15) == "Content-Length:" || line.substr(0, 15) == "content-length:")) {
    // Exactly the size announced, when within the bound (curl refuses a
    // larger one itself: CURLOPT_MAXFILESIZE_LARGE).
    std::uint64_t length = 0;
    std::string_view v = line.substr(15);
    while (!v.empty() && v.front() == ' ') {
      v.remove_prefix(1);
    }
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
    if (ec == std::errc() && t->status / 100 == 2 && length > t->max) {
      // An object over the bound, refused on its announced size before any
      // byte of its body (returning less than the line aborts the transfer).
      t->cut = true;
      return 0;
    }
    if (ec == std::errc() && t->status / 100 == 2 && t->body->empty()) {
      t->body->reserve(static_cast<std::size_t>(length));
    }
    (void)end;
  }
  if (line.size() > 7 && (line.substr(0, 7) == "Server:" || line.substr(0, 7) == "server:")) {
    std::string_view v = line.substr(7);
    while (!v.empty() && (v.front() == ' ')) {
      v.remove_prefix(1);
    }
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n')) {
      v.remove_suffix(1);
    }
    *t->server = std::string(v);
  }
  return size * n;
}

std::size_t on_upload(char* out, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t len = std::min(size * n, t->upload.size() - t->sent);
  std::memcpy(out, t->upload.data() + t->sent, len);
  t->sent += len;
  return len;
}

// Reads a credential from a file (first line) or an environment variable.
Result<std::string> read_secret(const std::string& file, const std::string& env, std::string_view what) {
  if (!file.empty()) {
    std::ifstream in(file);
    std::string line;
    if (!in || !std::getline(in, line) || line.empty()) {
      return make_error(ErrorCode::permission_denied,
                        fmt::format("cannot read the {} from {} (give a readable file whose first line is it)", what,
                                    file));
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.pop_back();
    }
    return line;
  }
  const char* v = std::getenv(env.c_str());
  if (v == nullptr || *v == '\0') {
    return make_error(ErrorCode::permission_denied,
                      fmt::format("the environment variable {} that should hold the {} is not set", env, what));
  }
  return std::string(v);
}

}  // namespace

HttpBackend::HttpBackend(RemoteSpec spec) : m_spec(std::move(spec)) {
  std::string prefix = m_spec.path;
  while (!prefix.empty() && prefix.back() == '/') {
    prefix.pop_back();
  }
  m_base = fmt::format("{}://{}:{}{}", m_spec.scheme == Scheme::https ? "https" : "http", m_spec.host, m_spec.port,
                       prefix);
}

HttpBackend::~HttpBackend() {
  for (void* h : m_idle) {
    curl_api().easy_cleanup(static_cast<CURL*>(h));
  }
}

std::string HttpBackend::object_url(std::string_view name) const { return m_base + "/" + std::string(name); }

HttpBackend::Deadline HttpBackend::operation_deadline() const {
  return Clock::now() + std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} + m_spec.timeout_ms);
}

Result<HttpBackend::Response> HttpBackend::request(std::string_view method, const std::string& url,
                                                   std::string_view body, std::uint64_t max_bytes,
                                                   Deadline deadline) {
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left_ms <= 0) {
    return make_error(ErrorCode::timeout,
                      fmt::format("{} on {}: the operation's deadline passed (raise timeout_ms or check the server)",
                                  method, m_spec.masked()));
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
  Response resp;
  Transfer t;
  t.body = &resp.body;
  t.server = &resp.server;
  t.max = max_bytes;
  t.upload = body;
  curl_slist* headers = nullptr;
  std::string userpwd;
  std::string auth_header;
  if (!m_spec.bearer_token_file.empty() || !m_spec.bearer_token_env.empty()) {
    auto token = read_secret(m_spec.bearer_token_file, m_spec.bearer_token_env, "bearer token");
    if (!token) {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(h);
      return tl::unexpected(token.error());
    }
    auth_header = "Authorization: Bearer " + *token;
    headers = api.slist_append(headers, auth_header.c_str());
  } else if (!m_spec.basic_auth_file.empty() || !m_spec.basic_auth_env.empty()) {
    auto pair = read_secret(m_spec.basic_auth_file, m_spec.basic_auth_env, "user:password");
    if (!pair) {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(h);
      return tl::unexpected(pair.error());
    }
    userpwd = *pair;
  } else if (!m_spec.user.empty() || !m_spec.password.empty()) {
    userpwd = m_spec.user + ":" + m_spec.password;
  }
  if (!userpwd.empty()) {
    api.easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    api.easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
  }
  api.easy_setopt(h, CURLOPT_URL, url.c_str());
  api.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // The whole transfer (resolve, connect, TLS, request, every byte of the
  // reply) ends by the operation's deadline; curl follows no redirect.
  api.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                  static_cast<long>(std::min<long long>(m_spec.connect_timeout_ms, left_ms)));
  api.easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
  if (!m_spec.ca_file.empty()) {
    api.easy_setopt(h, CURLOPT_CAINFO, m_spec.ca_file.c_str());
  }
  api.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  api.easy_setopt(h, CURLOPT_WRITEDATA, &t);
  api.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  api.easy_setopt(h, CURLOPT_HEADERDATA, &t);
  api.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (method == "HEAD") {
    api.easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    api.easy_setopt(h, CURLOPT_UPLOAD, 1L);
    api.easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
    api.easy_setopt(h, CURLOPT_READDATA, &t);
    api.easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
    headers = api.slist_append(headers, "Content-Type: application/octet-stream");
    headers = api.slist_append(headers, "Expect:");
  } else if (method != "GET") {
    api.easy_setopt(h, CURLOPT_CUSTOMREQUEST, std::string(method).c_str());
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
  resp.cut = t.cut;
  {
    std::lock_guard lock(m_mutex);
    m_idle.push_back(h);
  }
  const bool too_large = (rc == CURLE_WRITE_ERROR && t.cut) || rc == CURLE_FILESIZE_EXCEEDED;
  if (too_large && method == "GET") {
    return make_error(k_object_too_large,
                      fmt::format("{} on {}: the object is larger than max_entry_size ({} bytes); refused without "
                                  "downloading it",
                                  method, m_spec.masked(), max_bytes));
  }
  if (rc != CURLE_OK && !too_large) {  // another method's answer is only read up to its bound
    const ErrorCode code = rc == CURLE_OPERATION_TIMEDOUT ? ErrorCode::timeout : ErrorCode::io;
    return make_error(code, fmt::format("{} on {}: {}{}", method, m_spec.masked(), api.easy_strerror(rc),
                                        code == ErrorCode::timeout
                                            ? " (no answer within the timeout; raise timeout_ms or check the server)"
                                            : ""));
  }
  return resp;
}

Result<std::optional<std::string>> HttpBackend::get(std::string_view name, std::uint64_t max_bytes) {
  auto r = request("GET", object_url(name), {}, max_bytes, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404) {
    return std::optional<std::string>{};
  }
  if (r->status != 200) {
    return make_error(r->status == 401 || r->status == 403 ? ErrorCode::permission_denied : ErrorCode::io,
                      fmt::format("GET on {} answered HTTP {}", m_spec.masked(), r->status));
  }
  if (r->body.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->body));
}

Result<bool> HttpBackend::put(std::string_view name, std::string_view value, std::uint64_t /*ttl_s*/) {
  const std::string url = object_url(name);
  const Deadline deadline = operation_deadline();  // HEAD and PUT together
  auto head = request("HEAD", url, {}, 0, deadline);
  if (!head) {
    return tl::unexpected(head.error());
  }
  if (head->status == 200) {
    return false;
  }
  auto r = request("PUT", url, value, 4096, deadline);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 200 || r->status == 201 || r->status == 204) {
    return true;
  }
  return make_error(r->status == 401 || r->status == 403 ? ErrorCode::permission_denied
                    : r->status == 507 || r->status == 413 ? ErrorCode::no_space
                                                           : ErrorCode::io,
                    fmt::format("PUT on {} answered HTTP {}", m_spec.masked(), r->status));
}

Result<bool> HttpBackend::remove(std::string_view name) {
  auto r = request("DELETE", object_url(name), {}, 4096, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404) {
    return false;
  }
  if (r->status == 200 || r->status == 204) {
    return true;
  }
  return make_error(ErrorCode::io, fmt::format("DELETE on {} answered HTTP {}", m_spec.masked(), r->status));
}

Result<std::string> HttpBackend::describe() {
  auto r = request("HEAD", m_base + "/", {}, 0, operation_deadline());
  if (!r) {
    return tl::unexpected(r.error());
  }
  return fmt::format("http {} ({})", r->status, r->server.empty() ? "no Server header" : r->server);
}

}  // namespace kcache::remote
