// cli/openssl_cpu_features.cpp: part of the kcache command (and of the test
// that checks it) when libcrypto is linked from its static archive on x86-64
// (CMakeLists.txt, KCACHE_OPENSSL_STATIC); not part of the kcache library,
// whose users may link OpenSSL's shared library, where this vector is private.
#include <sys/platform/x86.h>  // glibc 2.33+

#include <cstdint>

// OpenSSL's CPU capability vector, filled from what glibc already knows.
//
// The static libcrypto's x86_64cpuid.o puts a call of OPENSSL_cpuid_setup()
// into the .init section of every program it is linked into, and OpenSSL's
// own setup runs CPUID about ten times. On a virtual machine each CPUID traps
// to the hypervisor: 20-70 us in every kcache process, a few percent of a
// whole cache hit (docs/performance.md, "Process start"). glibc ran CPUID
// once already, before any .init, and keeps the raw leaves and which features
// the system lets a program use. This definition takes the place of OpenSSL's
// (crypto/cpuid.c is then not linked) and builds the same vector from them:
//   [0] CPUID.1:EDX, bit 10 set (OpenSSL's "initialised" mark), the
//       synthetic bits 20 and 30 (vendor hints) and 28 (HTT) clear;
//   [1] CPUID.1:ECX, [2] CPUID.(7,0):EBX, [3] CPUID.(7,0):ECX, with every
//       AVX / AVX-512 feature cleared unless glibc says it is usable (the
//       OS saves those registers), as OpenSSL clears them by XCR0.
// kcache uses only SHA-256 from the static libcrypto; its assembly picks
// SHA-NI (word 2, bit 29), else AVX2+BMI, else SSSE3, else plain code: the
// same choice OpenSSL's own setup makes on this machine
// (test `Sha256.CpuVectorMatchesOpenSslsChoice`). The OPENSSL_ia32cap
// environment variable is not read.
extern "C" {
extern unsigned int OPENSSL_ia32cap_P[];  // NOLINT: OpenSSL's name, defined in its x86_64cpuid.o
void OPENSSL_cpuid_setup(void);           // NOLINT
void OPENSSL_cpuid_setup(void) {
  const cpuid_feature* leaf1 = __x86_get_cpuid_feature_leaf(CPUID_INDEX_1);
  const cpuid_feature* leaf7 = __x86_get_cpuid_feature_leaf(CPUID_INDEX_7);
  enum { eax, ebx, ecx, edx };
  std::uint32_t w0 = leaf1->cpuid_array[edx];
  std::uint32_t w1 = leaf1->cpuid_array[ecx];
  std::uint32_t w2 = leaf7->cpuid_array[ebx];
  std::uint32_t w3 = leaf7->cpuid_array[ecx];
  w0 = (w0 & ~((1u << 20) | (1u << 28) | (1u << 30))) | (1u << 10);
  constexpr std::uint32_t avx_bit = 1u << 28, fma_bit = 1u << 12, f16c_bit = 1u << 29;
  // Leaf 7 EBX: AVX2 (5) and the AVX-512 bits (16, 17, 21, 26, 27, 28, 30, 31).
  constexpr std::uint32_t avx2_bit = 1u << 5;
  constexpr std::uint32_t avx512_ebx =
      (1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31);
  // Leaf 7 ECX: AVX512_VBMI (1), VBMI2 (6), GFNI-on-ZMM is not a bit; VAES (9),
  // VPCLMULQDQ (10), VNNI (11), BITALG (12), VPOPCNTDQ (14).
  constexpr std::uint32_t avx512_ecx = (1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14);
  constexpr std::uint32_t vector_aes_ecx = (1u << 9) | (1u << 10);
  if (CPU_FEATURE_ACTIVE(AVX) == 0) {
    w1 &= ~(avx_bit | fma_bit | f16c_bit);
    w3 &= ~vector_aes_ecx;
  }
  if (CPU_FEATURE_ACTIVE(AVX2) == 0) {
    w2 &= ~avx2_bit;
  }
  if (CPU_FEATURE_ACTIVE(AVX512F) == 0) {
    w2 &= ~avx512_ebx;
    w3 &= ~avx512_ecx;
  }
  OPENSSL_ia32cap_P[0] = w0;
  OPENSSL_ia32cap_P[1] = w1;
  OPENSSL_ia32cap_P[2] = w2;
  OPENSSL_ia32cap_P[3] = w3;
}
}  // extern "C"
