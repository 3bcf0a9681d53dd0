#include "store/remote/redis_cluster_slots.hpp"

#include <array>

namespace kcache::remote {

namespace {

constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<std::uint16_t>((crc & 0x8000U) != 0 ? (crc << 1) ^ 0x1021U : crc << 1);
    }
    t[i] = crc;
  }
  return t;
}

constexpr auto k_table = make_table();

}  // namespace

std::uint16_t crc16_xmodem(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc = static_cast<std::uint16_t>((crc << 8) ^ k_table[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xFFU]);
  }
  return crc;
}

int cluster_key_slot(std::string_view key) noexcept {
  // The spec: hash only between the first '{' and the first '}' after it,
  // when that is not empty; "{}" or an unclosed '{' hash the whole key.
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    if (const auto close = key.find('}', open + 1); close != std::string_view::npos && close != open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16_xmodem(key) & (k_cluster_slots - 1);
}

}  // namespace kcache::remote
