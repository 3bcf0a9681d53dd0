// compile/memo_reader.hpp: a strict cursor over the text of kcache's memo
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

#include "compile/header_manifest.hpp"

namespace kcache::jit {

class MemoReader {
public:
  explicit MemoReader(std::string_view t) : m_t(t) {}

  // (Compared byte by byte, with no call: the literals are a few bytes, and
  // a manifest is read with five of them per header on every hit.)
  bool lit(std::string_view s) {
    if (!peek(s)) {
      return false;
    }
    m_i += s.size();
    return true;
  }

  bool peek(std::string_view s) const {
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
  // '-' only for signed types), in one tight loop: a manifest holds five
  // numbers per header, read on every hit.
  template <typename T>
  bool num(T& v) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    const char* p = m_t.data() + m_i;
    const char* e = m_t.data() + m_t.size();
    const bool negative = std::is_signed_v<T> && p != e && *p == '-';
    if (negative) {
      ++p;
    }
    const char* digits = p;
    U n = 0;
    // No overflow is possible within the first digits10 digits.
    const char* unchecked = p + std::min<std::ptrdiff_t>(e - p, std::numeric_limits<U>::digits10);
    // Eight digits at a time while they are all digits (a stamp's times
    // have 19), then one at a time: the same digits, the same result.
    for (std::uint64_t eight = 0; unchecked - p >= 8 && eight_digits(p, eight); p += 8) {
      n = static_cast<U>(n * 100000000u + eight);
    }
    while (p != unchecked && static_cast<unsigned>(*p - '0') < 10u) {
      n = n * 10 + static_cast<U>(*p - '0');
      ++p;
    }
    while (p != e && static_cast<unsigned>(*p - '0') < 10u) {
      if (__builtin_mul_overflow(n, U{10}, &n) || __builtin_add_overflow(n, static_cast<U>(*p - '0'), &n)) {
        return false;
      }
      ++p;
    }
    const U limit = static_cast<U>(std::numeric_limits<T>::max()) + (negative ? 1u : 0u);
    if (p == digits || n > limit || (*digits == '0' && p - digits > 1)) {
      return false;  // canonical only: no leading zero, as kcache writes numbers
    }
    v = negative ? static_cast<T>(U{0} - n) : static_cast<T>(n);
    m_i = static_cast<std::size_t>(p - m_t.data());
    return true;
  }

  bool str(std::string& s) {
    std::size_t n = 0;
    if (!num(n) || !lit(":") || n > m_t.size() - m_i) {
      return false;
    }
    s.assign(m_t.substr(m_i, n));
    m_i += n;
    return true;
  }

  bool hex64(std::string& s) {
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
    s.assign(h);
    m_i += 64;
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
  // The value of the 8 ASCII digits at `p` (which must have 8 readable
  // bytes), or false when any of them is not a digit (SWAR, as fast_float).
  static bool eight_digits(const char* p, std::uint64_t& out) {
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    if ((((v & 0xF0F0F0F0F0F0F0F0ULL) | (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) !=
         0x3333333333333333ULL)) {
      return false;
    }
    if constexpr (std::endian::native == std::endian::big) {
      v = __builtin_bswap64(v);
    }
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8);
    v = (((v & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
         (((v >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >>
        32;
    out = v;
    return true;
  }

  // Whether the 8 bytes at `p` are all lowercase hex digits ('0'-'9',
  // 'a'-'f'), without a branch per byte (SWAR: with every byte below 0x80,
  // (b | 0x80) - lo keeps the high bit exactly when b >= lo, and
  // (hi | 0x80) - b keeps it exactly when b <= hi; no borrow crosses bytes).
  static bool eight_hex(const char* p) {
    constexpr std::uint64_t ones = 0x0101010101010101ULL;
    constexpr std::uint64_t high = 0x80 * ones;
    std::uint64_t v = 0;
    std::memcpy(&v, p, 8);
    const auto in = [v](unsigned lo, unsigned hi) {
      return ((v | high) - lo * ones) & (((hi * ones) | high) - v) & high;
    };
    return (v & high) == 0 && (in('0', '9') | in('a', 'f')) == high;
  }

  std::string_view m_t;
  std::size_t m_i = 0;
};

}  // namespace kcache::jit
