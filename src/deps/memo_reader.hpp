// deps/memo_reader.hpp: a strict cursor over the text of kcache's memo
// files (header manifests, directory listings) (private).
//
// Every read either matches exactly and advances, or fails and leaves the
// position where it was not meaningful: callers give up on the first failure.
// Numbers are canonical decimal (no '+', no leading zero; a '-' only for
// signed types); a str is `length ":" bytes`.
//
// Thread-safety: a value; one per parse.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "deps/header_manifest.hpp"

namespace kcache::jit {

class MemoReader {
public:
  explicit MemoReader(std::string_view t) : m_t(t) {}

  // (Compared byte by byte, with no call: the literals are a few bytes, and
  // a manifest is read with five of them per header on every hit. The small
  // readers are always inlined: a call per field costs more than the field.)
  [[gnu::always_inline]] bool lit(std::string_view s) {
    if (!peek(s)) {
      return false;
    }
    m_i += s.size();
    return true;
  }

  // A literal's length known when compiled (no strlen per call).
  template <std::size_t N>
  [[gnu::always_inline]] bool lit(const char (&s)[N]) {
    return lit(std::string_view(s, N - 1));
  }
  template <std::size_t N>
  [[gnu::always_inline]] bool peek(const char (&s)[N]) const {
    return peek(std::string_view(s, N - 1));
  }

  [[gnu::always_inline]] bool peek(std::string_view s) const {
    if (m_t.size() - m_i < s.size()) {
      return false;
    }
    const char* p = m_t.data() + m_i;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (p[i] != s[i]) {
        return false;
      }
    }
    return true;
  }

  // Decimal as kcache writes it (std::to_string: no '+', no leading zero; a
  // '-' only for signed types): the digit run is measured eight bytes at a
  // time, then converted eight digits at a time, with no test per digit (a
  // manifest holds five numbers per header, read on every hit).
  template <typename T>
  [[gnu::always_inline]] bool num(T& v) {
    static_assert(std::is_integral_v<T>);
    const char* p = m_t.data() + m_i;
    if (m_t.size() - m_i >= 24 && !(std::is_signed_v<T> && *p == '-')) {
      // Up to 19 digits with no loop at all (a manifest's line always has
      // more than 24 bytes after its numbers); longer ones below.
      std::uint64_t n = 0;
      std::size_t len = 0;
      if (short_run(p, n, len)) {
        if (len == 0 || (*p == '0' && len > 1) || n > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
          return false;  // canonical only: no leading zero, as kcache writes numbers
        }
        v = static_cast<T>(n);
        m_i += len;
        return true;
      }
    }
    return long_num(v);
  }

  // A str, as a view into the text (the caller builds its string in place).
  bool str(std::string_view& s) {
    std::size_t n = 0;
    if (!num(n) || !lit(":") || n > m_t.size() - m_i) {
      return false;
    }
    s = m_t.substr(m_i, n);
    m_i += n;
    return true;
  }

  bool str(std::string& s) {
    std::string_view v;
    if (!str(v)) {
      return false;
    }
    s = std::string(v);  // constructed: cheaper than assign() into an empty string
    return true;
  }

  // 64 lowercase hex digits, as a view into the text.
  bool hex64(std::string_view& s) {
    if (m_t.size() - m_i < 64) {
      return false;
    }
    const std::string_view h = m_t.substr(m_i, 64);
    // Lowercase hex only, judged eight bytes at a time (a manifest holds one
    // digest per header: this runs on every hit).
    for (std::size_t i = 0; i < 64; i += 8) {
      if (!eight_hex(h.data() + i)) {
        return false;
      }
    }
    s = h;
    m_i += 64;
    return true;
  }

  bool hex64(std::string& s) {
    std::string_view v;
    if (!hex64(v)) {
      return false;
    }
    s = std::string(v);
    return true;
  }

  bool stamp(FileStamp& s) {
    return num(s.dev) && lit(" ") && num(s.ino) && lit(" ") && num(s.size) && lit(" ") && num(s.mtime_ns) &&
           lit(" ") && num(s.ctime_ns);
  }

  // The next `n` bytes, whatever they are.
  bool raw(std::size_t n, std::string_view& out) {
    if (n > m_t.size() - m_i) {
      return false;
    }
    out = m_t.substr(m_i, n);
    m_i += n;
    return true;
  }

  bool at_end() const { return m_i == m_t.size(); }

  // Bytes read so far.
  std::size_t pos() const { return m_i; }

private:
  // num() near the end of the text, of a negative number, or of one longer
  // than 19 digits: the digit run measured, then converted eight digits at a
  // time (out of line: the common case above stays small).
  template <typename T>
  [[gnu::noinline]] bool long_num(T& v) {
    using U = std::make_unsigned_t<T>;
    const char* p = m_t.data() + m_i;
    const char* e = m_t.data() + m_t.size();
    const bool negative = std::is_signed_v<T> && p != e && *p == '-';
    if (negative) {
      ++p;
    }
    const std::size_t len = digit_run(p, e);
    if (len == 0 || (*p == '0' && len > 1)) {
      return false;  // canonical only: no leading zero, as kcache writes numbers
    }
    const char* end = p + len;
    U n = 0;
    // No overflow is possible within the first digits10 digits.
    const char* unchecked = p + std::min<std::size_t>(len, std::numeric_limits<U>::digits10);
    for (; unchecked - p >= 8; p += 8) {
      n = static_cast<U>(n * 100000000u + eight_digits(p));
    }
    for (; p != unchecked; ++p) {
      n = static_cast<U>(n * 10 + static_cast<U>(*p - '0'));
    }
    for (; p != end; ++p) {
      if (__builtin_mul_overflow(n, U{10}, &n) || __builtin_add_overflow(n, static_cast<U>(*p - '0'), &n)) {
        return false;
      }
    }
    const U limit = static_cast<U>(std::numeric_limits<T>::max()) + (negative ? 1u : 0u);
    if (n > limit) {
      return false;
    }
    v = negative ? static_cast<T>(U{0} - n) : static_cast<T>(n);
    m_i = static_cast<std::size_t>(end - m_t.data());
    return true;
  }

  // Bit 7 of each byte of `v` set where that byte is in [lo, hi] and below
  // 0x80 (SWAR: with b below 0x80, (b | 0x80) - lo keeps bit 7 exactly when
  // b >= lo, and (hi | 0x80) - b keeps it exactly when b <= hi; only a byte
  // of 0x80 or more, itself never "in", may borrow from the byte above it:
  // callers judge the bytes up to the first one not in range, or all).
  [[gnu::always_inline]] static std::uint64_t bytes_in(std::uint64_t v, unsigned lo, unsigned hi) {
    constexpr std::uint64_t ones = 0x0101010101010101ULL;
    constexpr std::uint64_t high = 0x80 * ones;
    return ((v | high) - lo * ones) & (((hi * ones) | high) - v) & ~v & high;
  }

  // The 8 bytes at `p`, the first in the low byte (so that a borrow in
  // bytes_in() only reaches bytes after the one that caused it).
  [[gnu::always_inline]] static std::uint64_t load8(const char* p) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    if constexpr (std::endian::native == std::endian::big) {
      v = __builtin_bswap64(v);
    }
    return v;
  }

  // How many ASCII digits start at `p` (before `e`), eight bytes at a time.
  static std::size_t digit_run(const char* p, const char* e) {
    constexpr std::uint64_t high = 0x8080808080808080ULL;
    std::size_t n = 0;
    for (; e - p - static_cast<std::ptrdiff_t>(n) >= 8; n += 8) {
      if (const std::uint64_t other = ~bytes_in(load8(p + n), '0', '9') & high; other != 0) {
        // The first byte that is no digit (those before it are judged right).
        return n + static_cast<std::size_t>(std::countr_zero(other)) / 8;
      }
    }
    while (p + n != e && static_cast<unsigned>(p[n] - '0') < 10u) {
      ++n;
    }
    return n;
  }

  // The digit run at `p` (which must have 24 readable bytes) when it is at
  // most 19 digits long: its length and value, from at most three 8-byte
  // loads; false when it is longer.
  [[gnu::always_inline]] static bool short_run(const char* p, std::uint64_t& n, std::size_t& len) {
    constexpr std::uint64_t high = 0x8080808080808080ULL;
    static constexpr std::uint64_t pow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
    const std::uint64_t v0 = load8(p);
    if (const std::uint64_t other = ~bytes_in(v0, '0', '9') & high; other != 0) {
      len = static_cast<std::size_t>(std::countr_zero(other)) / 8;
      n = first_digits(v0, len);
      return true;
    }
    const std::uint64_t v1 = load8(p + 8);
    if (const std::uint64_t other = ~bytes_in(v1, '0', '9') & high; other != 0) {
      const std::size_t k = static_cast<std::size_t>(std::countr_zero(other)) / 8;
      len = 8 + k;
      n = digits_value(v0) * pow10[k] + first_digits(v1, k);
      return true;
    }
    const std::uint64_t v2 = load8(p + 16);
    const std::uint64_t other = ~bytes_in(v2, '0', '9') & high;
    const std::size_t k = other == 0 ? 8 : static_cast<std::size_t>(std::countr_zero(other)) / 8;
    if (k > 3) {
      return false;  // 20 digits or more: may overflow, read one at a time
    }
    len = 16 + k;
    n = (digits_value(v0) * 100000000u + digits_value(v1)) * pow10[k] + first_digits(v2, k);
    return true;
  }

  // The value of the first `k` (0-8) bytes of `v` (load8()), all digits: they
  // are shifted to the end of an eight-digit number whose first bytes are '0'.
  [[gnu::always_inline]] static std::uint64_t first_digits(std::uint64_t v, std::size_t k) {
    if (k == 0) {
      return 0;
    }
    const unsigned s = static_cast<unsigned>(8 * (8 - k));
    return digits_value(s == 0 ? v : (v << s) | (0x3030303030303030ULL >> (64 - s)));
  }

  // The value of the 8 ASCII digits at `p` (SWAR, as fast_float).
  static std::uint64_t eight_digits(const char* p) { return digits_value(load8(p)); }

  // The value of eight ASCII digits loaded by load8().
  [[gnu::always_inline]] static std::uint64_t digits_value(std::uint64_t v) {
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8);
    v = (((v & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
         (((v >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >>
        32;
    return v;
  }

  // Whether the 8 bytes at `p` are all lowercase hex digits ('0'-'9', 'a'-'f').
  static bool eight_hex(const char* p) {
    const std::uint64_t v = load8(p);
    return (bytes_in(v, '0', '9') | bytes_in(v, 'a', 'f')) == 0x8080808080808080ULL;
  }

  std::string_view m_t;
  std::size_t m_i = 0;
};

}  // namespace kcache::jit
