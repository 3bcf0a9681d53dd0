#include "store/remote/tls_session.hpp"
#include "util/dl_symbols.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>

#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

namespace kcache::remote {

namespace {

// The libssl functions kcache calls, loaded once (the header gives only
// types and constants).
struct SslApi {
  const SSL_METHOD* (*client_method)() = nullptr;
  SSL_CTX* (*ctx_new)(const SSL_METHOD*) = nullptr;
  void (*ctx_free)(SSL_CTX*) = nullptr;
  int (*ctx_default_paths)(SSL_CTX*) = nullptr;
  int (*ctx_load_locations)(SSL_CTX*, const char*, const char*) = nullptr;
  void (*ctx_set_verify)(SSL_CTX*, int, SSL_verify_cb) = nullptr;
  SSL* (*ssl_new)(SSL_CTX*) = nullptr;
  void (*ssl_free)(SSL*) = nullptr;
  int (*set_fd)(SSL*, int) = nullptr;
  int (*set1_host)(SSL*, const char*) = nullptr;
  long (*ctrl)(SSL*, int, long, void*) = nullptr;
  int (*connect)(SSL*) = nullptr;
  int (*read)(SSL*, void*, int) = nullptr;
  int (*write)(SSL*, const void*, int) = nullptr;
  int (*get_error)(const SSL*, int) = nullptr;
  long (*verify_result)(const SSL*) = nullptr;
  // libcrypto's, found through libssl's dependencies: the error queue is the
  // one libssl fills (a statically linked copy would have its own, always
  // empty one, and would pull OpenSSL's error and X509 tables into every
  // kcache process's start-up).
  unsigned long (*err_get)() = nullptr;
  void (*err_clear)() = nullptr;
  void (*err_string)(unsigned long, char*, std::size_t) = nullptr;
  const char* (*verify_string)(long) = nullptr;
  std::string error;  // why it could not be loaded; empty when loaded
};

const SslApi& ssl_api() {
  static const SslApi api = [] {
    SslApi a;
    util::DlSymbols lib("libssl.so.3", "for rediss:// remotes (install Debian's libssl3)");
    lib.resolve(a.client_method, "TLS_client_method");
    lib.resolve(a.ctx_new, "SSL_CTX_new");
    lib.resolve(a.ctx_free, "SSL_CTX_free");
    lib.resolve(a.ctx_default_paths, "SSL_CTX_set_default_verify_paths");
    lib.resolve(a.ctx_load_locations, "SSL_CTX_load_verify_locations");
    lib.resolve(a.ctx_set_verify, "SSL_CTX_set_verify");
    lib.resolve(a.ssl_new, "SSL_new");
    lib.resolve(a.ssl_free, "SSL_free");
    lib.resolve(a.set_fd, "SSL_set_fd");
    lib.resolve(a.set1_host, "SSL_set1_host");
    lib.resolve(a.ctrl, "SSL_ctrl");
    lib.resolve(a.connect, "SSL_connect");
    lib.resolve(a.read, "SSL_read");
    lib.resolve(a.write, "SSL_write");
    lib.resolve(a.get_error, "SSL_get_error");
    lib.resolve(a.verify_result, "SSL_get_verify_result");
    lib.resolve(a.err_get, "ERR_get_error");
    lib.resolve(a.err_clear, "ERR_clear_error");
    lib.resolve(a.err_string, "ERR_error_string_n");
    lib.resolve(a.verify_string, "X509_verify_cert_error_string");
    a.error = lib.error();
    return a;
  }();
  return api;
}

// One verifying client context per CA file ("" = the system store), kept for
// the process: loading a CA store costs milliseconds, a session reuses it.
Result<SSL_CTX*> context_for(const std::string& ca_file) {
  static std::mutex mutex;
  static std::map<std::string, SSL_CTX*> contexts;  // never freed: process-long, like the library
  const SslApi& api = ssl_api();
  std::lock_guard lock(mutex);
  if (auto it = contexts.find(ca_file); it != contexts.end()) {
    return it->second;
  }
  SSL_CTX* ctx = api.ctx_new(api.client_method());
  if (ctx == nullptr) {
    return make_error(ErrorCode::io, "cannot create a TLS context (out of memory?)");
  }
  const int ok = ca_file.empty() ? api.ctx_default_paths(ctx) : api.ctx_load_locations(ctx, ca_file.c_str(), nullptr);
  if (ok != 1) {
    api.ctx_free(ctx);
    return make_error(ErrorCode::invalid_argument,
                      ca_file.empty() ? std::string("cannot load the system's CA certificates")
                                      : fmt::format("cannot load CA certificates from ca_file {} (give a readable "
                                                    "PEM file of CA certificates)",
                                                    ca_file));
  }
  api.ctx_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  contexts.emplace(ca_file, ctx);
  return ctx;
}

std::string last_ssl_error(const SslApi& api) {
  const unsigned long e = api.err_get();
  api.err_clear();
  if (e == 0) {
    return "the connection failed during the TLS exchange";
  }
  char buf[256];
  api.err_string(e, buf, sizeof buf);
  return buf;
}

}  // namespace

Result<std::unique_ptr<TlsSession>> TlsSession::handshake(int fd, const std::string& host, const std::string& ca_file,
                                                          std::chrono::steady_clock::time_point deadline) {
  const SslApi& api = ssl_api();
  if (!api.error.empty()) {
    return make_error(ErrorCode::unsupported, api.error);
  }
  auto ctx = context_for(ca_file);
  if (!ctx) {
    return tl::unexpected(ctx.error());
  }
  std::unique_ptr<TlsSession> s(new TlsSession());
  SSL* ssl = api.ssl_new(*ctx);
  if (ssl == nullptr) {
    return make_error(ErrorCode::io, "cannot create a TLS session (out of memory?)");
  }
  s->m_ssl = ssl;
  api.set_fd(ssl, fd);
  // The name the certificate must carry (an IP address is matched against its
  // IP SANs), and SNI for a DNS name.
  if (api.set1_host(ssl, host.c_str()) != 1) {
    return make_error(ErrorCode::invalid_argument, fmt::format("cannot verify TLS for host \"{}\"", host));
  }
  if (host.find_first_not_of("0123456789.:") != std::string::npos) {
    api.ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(host.c_str()));
  }
  api.err_clear();
  for (;;) {
    const int rc = api.connect(ssl);
    if (rc == 1) {
      return s;
    }
    const int err = api.get_error(ssl, rc);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      const long verify = api.verify_result(ssl);
      if (verify != X509_V_OK) {
        return make_error(ErrorCode::io,
                          fmt::format("TLS: the server's certificate is not trusted: {} (set ca_file to the CA that "
                                      "signed it)",
                                      api.verify_string(verify)));
      }
      return make_error(ErrorCode::io, "TLS handshake failed: " + last_ssl_error(api));
    }
    pollfd p{fd, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30))) == 0) {
      return make_error(ErrorCode::timeout, "no TLS handshake within the deadline (raise connect_timeout_ms or "
                                            "timeout_ms, or check the server)");
    }
  }
}

TlsSession::~TlsSession() {
  if (m_ssl != nullptr) {
    ssl_api().ssl_free(static_cast<SSL*>(m_ssl));
  }
}

TlsSession::Step TlsSession::step(int n) {
  Step s;
  if (n > 0) {
    s.kind = Step::Kind::moved;
    s.bytes = static_cast<std::size_t>(n);
    return s;
  }
  const int err = ssl_api().get_error(static_cast<SSL*>(m_ssl), n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    s.kind = Step::Kind::wait;
    s.want_read = err == SSL_ERROR_WANT_READ;
  } else if (err == SSL_ERROR_ZERO_RETURN) {
    s.kind = Step::Kind::closed;
  } else {
    s.kind = Step::Kind::failed;
    s.error = "TLS: " + last_ssl_error(ssl_api());
  }
  return s;
}

TlsSession::Step TlsSession::read(char* buf, std::size_t len) {
  ssl_api().err_clear();
  return step(ssl_api().read(static_cast<SSL*>(m_ssl), buf, static_cast<int>(std::min<std::size_t>(len, 1 << 30))));
}

TlsSession::Step TlsSession::write(const char* buf, std::size_t len) {
  ssl_api().err_clear();
  return step(ssl_api().write(static_cast<SSL*>(m_ssl), buf, static_cast<int>(std::min<std::size_t>(len, 1 << 30))));
}

}  // namespace kcache::remote
