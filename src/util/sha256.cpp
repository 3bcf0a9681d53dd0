#include "util/sha256.hpp"

#include <cstdio>
#include <cstdlib>

#include <openssl/evp.h>
#include <xxhash.h>

#include "util/hex.hpp"

namespace kcache::util {

namespace {
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "kcache: fatal: OpenSSL %s failed\n", what);
  std::abort();
}
EVP_MD_CTX* ctx_of(void* p) { return static_cast<EVP_MD_CTX*>(p); }

// OpenSSL 3 looks the algorithm up in its provider tables on every init that
// names EVP_sha256(); fetching it once makes a new digest cheap (keys are made
// of many small digests). The fetched method lives as long as the process.
const EVP_MD* sha256_method() {
  static EVP_MD* const md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (fetched == nullptr) {
      die("EVP_MD_fetch(SHA256)");
    }
    return fetched;
  }();
  return md;
}
}  // namespace

void Sha256::CtxDeleter::operator()(void* ctx) const noexcept { EVP_MD_CTX_free(ctx_of(ctx)); }

Sha256::Sha256() : m_ctx(EVP_MD_CTX_new()) {
  if (!m_ctx || EVP_DigestInit_ex(ctx_of(m_ctx.get()), sha256_method(), nullptr) != 1) {
    die("EVP_DigestInit_ex");
  }
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
  if (size != 0 && EVP_DigestUpdate(ctx_of(m_ctx.get()), data, size) != 1) {
    die("EVP_DigestUpdate");
  }
}

Digest256 Sha256::finish() {
  Digest256 out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_of(m_ctx.get()), out.data(), &len) != 1 || len != out.size()) {
    die("EVP_DigestFinal_ex");
  }
  return out;
}

Digest256 sha256(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

std::string sha256_hex(std::string_view bytes) {
  const auto d = sha256(bytes);
  return to_hex(d.data(), d.size());
}

std::uint64_t xxh3_64(std::string_view bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace kcache::util
