// Link-time shims for the portable build (KCACHE_PORTABLE: the wheel,
// docs/install.md), linked into the kcache command and the stand-in only.
//
// GCC 12's static libstdc++ (random.o, pulled in by std::logic_error through
// cow-string-inst.o) calls arc4random, which glibc has only since 2.36, so
// every statically linked C++ binary built on Debian 12 needs glibc 2.36.
// This definition, from getrandom(2) (glibc 2.25), is bound inside the binary
// instead; it is hidden, so neither the command's libraries nor the program
// the stand-in is preloaded into ever see it. (<stdlib.h>, which declares
// glibc's own, is not included here, and the file is left out of unity builds.)
#include <sys/random.h>

#include <cerrno>
#include <cstdint>

extern "C" __attribute__((visibility("hidden"))) std::uint32_t arc4random(void) {
  std::uint32_t value = 0;
  auto* p = reinterpret_cast<unsigned char*>(&value);
  std::size_t got = 0;
  while (got < sizeof value) {
    const ssize_t n = ::getrandom(p + got, sizeof value - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      __builtin_trap();  // as glibc's arc4random: there is no way to report a failure
    }
  }
  return value;
}
