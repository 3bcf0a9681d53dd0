// Sizes as settings and reports write them: parse_size and format_size
// (include/kcache/config.hpp).
#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "kcache/config.hpp"

namespace kcache {

Result<std::uint64_t> parse_size(std::string_view text) {
  auto fail = [&] {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("\"{}\" is not a size; use a number of bytes or a number with a unit "
                                  "K, M, G or T (binary), such as 512M or 10G",
                                  text));
  };
  std::size_t i = 0;
  std::uint64_t whole = 0;
  std::size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (__builtin_mul_overflow(whole, 10U, &whole) ||
        __builtin_add_overflow(whole, static_cast<unsigned>(text[i] - '0'), &whole)) {
      return fail();
    }
    ++i;
    ++digits;
  }
  std::uint64_t frac = 0;
  std::uint64_t frac_scale = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (frac_scale < 1'000'000'000) {  // further digits cannot matter for a byte count
        frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
        frac_scale *= 10;
      }
      ++i;
      ++digits;
    }
  }
  if (digits == 0) {
    return fail();
  }
  if (i < text.size() && text[i] == ' ') {
    ++i;
  }
  int shift = 0;
  if (i < text.size()) {
    switch (std::tolower(static_cast<unsigned char>(text[i]))) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      case 'b': shift = -1; break;
      default: return fail();
    }
    ++i;
  }
  std::string_view rest = text.substr(i);
  if (shift > 0 && (rest == "iB" || rest == "ib" || rest == "IB" || rest == "Ib" || rest == "B" || rest == "b")) {
    rest = {};
  }
  if (!rest.empty()) {
    return fail();
  }
  if (shift < 0) {
    shift = 0;  // a plain "B" suffix
  }
  const std::uint64_t unit = std::uint64_t{1} << shift;
  if (shift == 0 && frac != 0) {
    return fail();  // no fractional bytes
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(whole, unit, &bytes)) {
    return fail();
  }
  // frac < frac_scale <= 1e9 and unit <= 2^40: the product fits in 64 bits.
  const std::uint64_t extra = frac * unit / frac_scale;
  if (__builtin_add_overflow(bytes, extra, &bytes)) {
    return fail();
  }
  return bytes;
}

std::string format_size(std::uint64_t bytes) {
  if (bytes < 1024) {
    return fmt::format("{} B", bytes);
  }
  static constexpr std::array<const char*, 5> k_units{"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < k_units.size()) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, k_units[u]);
}

}  // namespace kcache
