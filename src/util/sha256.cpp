#include "util/sha256.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The direct SHA256_* functions are deprecated in OpenSSL 3 (see below).
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/sha.h>
#define XXH_INLINE_ALL 1
#include <xxhash.h>

#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h>  // glibc 2.33+
#define KCACHE_HAVE_GLIBC_X86_FEATURES 1
#endif

#include "util/xxh3_simd.hpp"

#include "util/hex.hpp"

namespace kcache::util {

namespace {
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "kcache: fatal: OpenSSL %s failed\n", what);
  std::abort();
}
}  // namespace

// OpenSSL's direct SHA256_Init/Update/Final run the same assembly (SHA-NI,
// AVX2) as an EVP digest, but EVP first builds OpenSSL 3's provider and method
// tables: 5.3 M instructions, about 1.5 ms, in every process that hashes
// anything. kcache is often a command that lives a few milliseconds (a cache
// hit), so it uses the direct functions, which OpenSSL 3 marks deprecated but
// keeps (docs/performance.md, "Process start").
#if defined(OPENSSL_NO_DEPRECATED_3_0)
#error "kcache needs OpenSSL's SHA256_Init/Update/Final (this OpenSSL was built without deprecated APIs)"
#endif

namespace {
static_assert(sizeof(SHA256_CTX) <= 112 && alignof(SHA256_CTX) <= 8, "Sha256::m_state is too small");
SHA256_CTX* ctx_of(unsigned char* state) { return reinterpret_cast<SHA256_CTX*>(state); }
}  // namespace

Sha256::Sha256() {
  if (SHA256_Init(ctx_of(m_state)) != 1) {
    die("SHA256_Init");
  }
}

void Sha256::update(const void* data, std::size_t size) {
  if (size != 0 && SHA256_Update(ctx_of(m_state), data, size) != 1) {
    die("SHA256_Update");
  }
}

Digest256 Sha256::finish() {
  Digest256 out{};
  if (SHA256_Final(out.data(), ctx_of(m_state)) != 1) {
    die("SHA256_Final");
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

HmacSha256::HmacSha256(std::string_view key) {
  if (key.size() > m_key.size()) {
    const Digest256 hashed = sha256(key);
    std::memcpy(m_key.data(), hashed.data(), hashed.size());
  } else if (!key.empty()) {
    std::memcpy(m_key.data(), key.data(), key.size());
  }
  std::array<unsigned char, 64> pad{};
  for (std::size_t i = 0; i < pad.size(); ++i) {
    pad[i] = static_cast<unsigned char>(m_key[i] ^ 0x36);
  }
  m_inner.update(pad.data(), pad.size());
}

Digest256 HmacSha256::finish() {
  const Digest256 inner_digest = m_inner.finish();
  std::array<unsigned char, 64> pad{};
  for (std::size_t i = 0; i < pad.size(); ++i) {
    pad[i] = static_cast<unsigned char>(m_key[i] ^ 0x5c);
  }
  Sha256 outer;
  outer.update(pad.data(), pad.size());
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

Digest256 hmac_sha256(std::string_view key, std::string_view bytes) {
  HmacSha256 h(key);
  h.update(bytes);
  return h.finish();
}

bool equal_constant_time(const void* a, const void* b, std::size_t size) noexcept {
  const auto* x = static_cast<const volatile unsigned char*>(a);
  const auto* y = static_cast<const volatile unsigned char*>(b);
  unsigned char diff = 0;
  for (std::size_t i = 0; i < size; ++i) {
    diff = static_cast<unsigned char>(diff | (x[i] ^ y[i]));
  }
  return diff == 0;
}

namespace {

// Which XXH3 code the CPU can run. glibc's dynamic loader has already asked
// the CPU; reading its answer costs nothing, where CPUID traps to the
// hypervisor on a virtual machine (see deps/directive_scanner.cpp).
enum class XxhCode { baseline, avx2, avx512 };

XxhCode xxh_code() noexcept {
#if defined(__x86_64__) && KCACHE_HAVE_GLIBC_X86_FEATURES
  static const XxhCode code = CPU_FEATURE_ACTIVE(AVX512F) ? XxhCode::avx512
                              : CPU_FEATURE_ACTIVE(AVX2)  ? XxhCode::avx2
                                                          : XxhCode::baseline;
  return code;
#else
  return XxhCode::baseline;
#endif
}

}  // namespace

std::uint64_t xxh3_64(std::string_view bytes) noexcept {
#if defined(__x86_64__)
  switch (xxh_code()) {
    case XxhCode::avx512:
      return simd::xxh3_64_avx512(bytes.data(), bytes.size());
    case XxhCode::avx2:
      return simd::xxh3_64_avx2(bytes.data(), bytes.size());
    case XxhCode::baseline:
      break;
  }
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

static_assert(sizeof(XXH3_state_t) <= 576 && alignof(XXH3_state_t) <= 64);

Xxh3::Xxh3() noexcept {
  XXH3_64bits_reset(reinterpret_cast<XXH3_state_t*>(m_state));
}

void Xxh3::update(const void* data, std::size_t size) noexcept {
#if defined(__x86_64__)
  switch (xxh_code()) {
    case XxhCode::avx512:
      return simd::xxh3_update_avx512(m_state, data, size);
    case XxhCode::avx2:
      return simd::xxh3_update_avx2(m_state, data, size);
    case XxhCode::baseline:
      break;
  }
#endif
  XXH3_64bits_update(reinterpret_cast<XXH3_state_t*>(m_state), data, size);
}

std::uint64_t Xxh3::digest() const noexcept {
  return XXH3_64bits_digest(reinterpret_cast<const XXH3_state_t*>(m_state));
}

}  // namespace kcache::util
