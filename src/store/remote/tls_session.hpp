// store/remote/tls_session.hpp: TLS over a connected, non-blocking socket,
// for rediss:// and rediss+cluster:// (RedisConnection drives it on the same
// deadline-polled loop as a plain socket).
//
// OpenSSL's libssl.so.3 is loaded with dlopen the first time a TLS remote is
// used, so a kcache process that never talks TLS to Redis does not map it
// (as libcurl for HTTP: docs/performance.md, "Process start"); kcache already
// links libcrypto. The server's certificate is always verified: its chain
// against `ca_file` when given, else the system's CA store, and its name
// against the host (a DNS name, or an IP address in the certificate's SAN).
//
// Thread-safety: a TlsSession is used by one thread at a time; the TLS
// contexts (one per CA file) are shared, under a mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::remote {

class TlsSession {
 public:
  // What one read or write did: moved `bytes` (> 0), or the peer closed,
  // or it must wait until the socket is readable (`want_read`) or writable,
  // or it failed (`error`).
  struct Step {
    enum class Kind { moved, closed, wait, failed };
    Kind kind = Kind::failed;
    std::size_t bytes = 0;
    bool want_read = true;
    std::string error;
  };

  // Runs the TLS handshake on `fd` (connected, non-blocking) before
  // `deadline`, verifying the server as `host`. Failure: unsupported (no
  // libssl.so.3), timeout, io (the handshake or the verification failed:
  // the message says why, e.g. "certificate verify failed: self-signed
  // certificate"), never a hang.
  static Result<std::unique_ptr<TlsSession>> handshake(int fd, const std::string& host, const std::string& ca_file,
                                                       std::chrono::steady_clock::time_point deadline);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  Step read(char* buf, std::size_t len);
  Step write(const char* buf, std::size_t len);

 private:
  TlsSession() = default;
  Step step(int n);
  void* m_ssl = nullptr;  // SSL*
};

}  // namespace kcache::remote
