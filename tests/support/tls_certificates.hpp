// tests/support/tls_certificates.hpp: a private CA and a server certificate
// for 127.0.0.1 (IP SAN) signed by it, made with the openssl command, for
// TLS tests (header-only).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kcache::test {

// Writes ca.pem, server.pem and server.key into `dir`. Returns false (and a
// reason in `why`) when openssl fails.
inline bool make_tls_certificates(const std::filesystem::path& dir, std::string* why) {
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::string script =
      "cd '" + d + "' && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=kcache-test-ca && "
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
      "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
      "-extfile san.ext";
  if (std::system(("{ " + script + "; } >'" + d + "/openssl.log' 2>&1").c_str()) != 0) {
    *why = "openssl could not make the test certificates; see " + d + "/openssl.log";
    return false;
  }
  return true;
}

// redis-server arguments that add a TLS port `port` with those certificates
// (clients are not asked for certificates).
inline std::vector<std::string> redis_tls_arguments(const std::filesystem::path& dir, int port) {
  return {"--tls-port", std::to_string(port), "--tls-cert-file", (dir / "server.pem").string(), "--tls-key-file",
          (dir / "server.key").string(), "--tls-ca-cert-file", (dir / "ca.pem").string(), "--tls-auth-clients", "no"};
}

}  // namespace kcache::test
