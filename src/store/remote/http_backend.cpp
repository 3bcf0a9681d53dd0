#include "store/remote/http_backend.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

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

HttpBackend::HttpBackend(RemoteSpec spec)
    : m_spec(std::move(spec)), m_client(m_spec.masked(), m_spec.connect_timeout_ms, m_spec.ca_file) {
  std::string prefix = m_spec.path;
  while (!prefix.empty() && prefix.back() == '/') {
    prefix.pop_back();
  }
  m_base = fmt::format("{}://{}:{}{}", m_spec.scheme == Scheme::https ? "https" : "http", m_spec.host, m_spec.port,
                       prefix);
}

HttpBackend::~HttpBackend() = default;

std::string HttpBackend::object_url(std::string_view name) const { return m_base + "/" + std::string(name); }

CurlClient::Deadline HttpBackend::operation_deadline() const {
  return CurlClient::Clock::now() +
         std::chrono::milliseconds(std::uint64_t{m_spec.connect_timeout_ms} + m_spec.timeout_ms);
}

Result<CurlResponse> HttpBackend::request(std::string_view method, const std::string& url, std::string_view body,
                                          std::uint64_t max_bytes, CurlClient::Deadline deadline, ObjectSource* upload,
                                          ObjectSink* sink) {
  CurlRequest req;
  req.upload = upload;
  req.sink = sink;
  req.method = method;
  req.url = url;
  req.body = body;
  req.max_bytes = max_bytes;
  if (!m_spec.bearer_token_file.empty() || !m_spec.bearer_token_env.empty()) {
    auto token = read_secret(m_spec.bearer_token_file, m_spec.bearer_token_env, "bearer token");
    if (!token) {
      return tl::unexpected(token.error());
    }
    req.headers.push_back("Authorization: Bearer " + *token);
  } else if (!m_spec.basic_auth_file.empty() || !m_spec.basic_auth_env.empty()) {
    auto pair = read_secret(m_spec.basic_auth_file, m_spec.basic_auth_env, "user:password");
    if (!pair) {
      return tl::unexpected(pair.error());
    }
    req.userpwd = *pair;
  } else if (!m_spec.user.empty() || !m_spec.password.empty()) {
    req.userpwd = m_spec.user + ":" + m_spec.password;
  }
  req.basic_auth = !req.userpwd.empty();
  return m_client.perform(req, deadline);
}

Error HttpBackend::get_error(long status) const {
  return Error{status == 401 || status == 403 ? ErrorCode::permission_denied : ErrorCode::io,
               fmt::format("GET on {} answered HTTP {}", m_spec.masked(), status),
               {}};
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
    return tl::unexpected(get_error(r->status));
  }
  if (r->body.empty()) {
    return std::optional<std::string>{};
  }
  return std::optional<std::string>(std::move(r->body));
}

Result<bool> HttpBackend::get_stream(std::string_view name, std::uint64_t max_bytes, ObjectSink& sink) {
  auto r = request("GET", object_url(name), {}, max_bytes, operation_deadline(), nullptr, &sink);
  if (!r) {
    return tl::unexpected(r.error());
  }
  if (r->status == 404) {
    return false;
  }
  if (r->status != 200) {
    return tl::unexpected(get_error(r->status));
  }
  return true;
}

Result<bool> HttpBackend::put(std::string_view name, std::string_view value, std::uint64_t ttl_s) {
  ViewSource source(value);
  return put_stream(name, source, ttl_s);
}

Result<bool> HttpBackend::put_stream(std::string_view name, ObjectSource& source, std::uint64_t /*ttl_s*/) {
  const std::string url = object_url(name);
  const CurlClient::Deadline deadline = operation_deadline();  // HEAD and PUT together
  auto head = request("HEAD", url, {}, 0, deadline);
  if (!head) {
    return tl::unexpected(head.error());
  }
  if (head->status == 200) {
    return false;
  }
  auto r = request("PUT", url, {}, 4096, deadline, &source);
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
