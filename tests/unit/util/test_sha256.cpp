// util::hmac_sha256 against the test vectors of RFC 4231 (keys shorter than,
// equal to and longer than the 64-byte block), util::equal_constant_time, and
// the CPU vector kcache gives the static libcrypto (util/sha256.cpp).
#include "util/sha256.hpp"

#include <gtest/gtest.h>

#include <string>

#include "util/hex.hpp"

#if defined(KCACHE_OPENSSL_STATIC) && defined(__x86_64__) && __has_include(<sys/platform/x86.h>)
#define KCACHE_TEST_CPU_VECTOR 1
extern "C" {
extern unsigned int OPENSSL_ia32cap_P[];                       // NOLINT: OpenSSL's names
unsigned long long OPENSSL_ia32_cpuid(unsigned int* words);  // NOLINT: its CPUID probe
void OPENSSL_cpuid_setup(void);                               // NOLINT: ours, or OpenSSL's
}
#endif

namespace kcache::util {
namespace {

#if defined(KCACHE_TEST_CPU_VECTOR)
// The vector filled from glibc's features must make SHA-256's assembly take
// the path OpenSSL's own CPUID probe makes it take on this machine: SHA-NI
// (word 2 bit 29), else AVX2 + BMI1 + BMI2 (word 2 bits 5, 3, 8), else AVX
// (word 1 bit 28) on an Intel CPU, else SSSE3 (word 1 bit 9).
TEST(Sha256, CpuVectorMatchesOpenSslsChoice) {
  unsigned int own[4] = {0, 0, 0, 0};
  const unsigned long long low = OPENSSL_ia32_cpuid(own);  // fills own[2], own[3]
  own[0] = static_cast<unsigned int>(low);
  own[1] = static_cast<unsigned int>(low >> 32);
  const unsigned int* ours = OPENSSL_ia32cap_P;
  EXPECT_NE(ours[0] & (1u << 10), 0u) << "the vector was never filled";
  EXPECT_EQ(ours[2] & (1u << 29), own[2] & (1u << 29)) << "SHA-NI";
  const unsigned int avx2_bmi = (1u << 3) | (1u << 5) | (1u << 8);
  EXPECT_EQ(ours[2] & avx2_bmi, own[2] & avx2_bmi) << "AVX2, BMI1, BMI2";
  EXPECT_EQ(ours[1] & (1u << 28), own[1] & (1u << 28)) << "AVX";
  EXPECT_EQ(ours[1] & (1u << 9), own[1] & (1u << 9)) << "SSSE3";
  // The setup linked is kcache's: OpenSSL's runs once per process and
  // leaves a vector cleared after it untouched; kcache's fills it again.
  const unsigned int saved[4] = {ours[0], ours[1], ours[2], ours[3]};
  for (int i = 0; i < 4; ++i) {
    OPENSSL_ia32cap_P[i] = 0;
  }
  OPENSSL_cpuid_setup();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(OPENSSL_ia32cap_P[i], saved[i]) << "word " << i << ": OpenSSL's own setup is linked, not kcache's";
    OPENSSL_ia32cap_P[i] = saved[i];
  }
  // Whatever path was chosen computes SHA-256 (FIPS 180-2 vector "abc").
  const auto d = sha256("abc");
  EXPECT_EQ(to_hex(d.data(), d.size()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
#endif

std::string hmac_hex(const std::string& key, const std::string& data) {
  const auto d = hmac_sha256(key, data);
  return to_hex(d.data(), d.size());
}

TEST(HmacSha256, MatchesRfc4231) {
  // Test case 1: a 20-byte key.
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a short key.
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: 50 bytes of 0xdd under a 20-byte key of 0xaa.
  EXPECT_EQ(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a 131-byte key (longer than a block: hashed first).
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // A 64-byte key is used as it is (not hashed): differs from its hash used as the key.
  const std::string block_key(64, 'k');
  const auto hashed = sha256(block_key);
  EXPECT_NE(hmac_hex(block_key, "x"),
            hmac_hex(std::string(reinterpret_cast<const char*>(hashed.data()), hashed.size()), "x"));
}

TEST(HmacSha256, EqualConstantTimeComparesEveryByte) {
  const std::string a = "0123456789abcdef0123456789abcdef";
  std::string b = a;
  EXPECT_TRUE(equal_constant_time(a.data(), b.data(), a.size()));
  for (std::size_t i : {std::size_t{0}, std::size_t{17}, a.size() - 1}) {
    b = a;
    b[i] = static_cast<char>(b[i] ^ 0x01);
    EXPECT_FALSE(equal_constant_time(a.data(), b.data(), a.size())) << i;
  }
  EXPECT_TRUE(equal_constant_time(a.data(), b.data(), 0));
}

}  // namespace
}  // namespace kcache::util
