#include "kcache/key.hpp"

#include <cstring>

#include "util/hex.hpp"

namespace kcache {

bool Key::is_valid_hex(std::string_view text) noexcept {
  return text.size() == k_hex_size && util::is_lower_hex(text);
}

Result<Key> Key::parse(std::string_view hex) {
  if (!is_valid_hex(hex)) {
    return make_error(ErrorCode::invalid_argument,
                      "not a kcache key: a key is exactly 64 lowercase hex characters");
  }
  const auto bytes = util::from_hex(hex);
  Bytes out{};
  std::memcpy(out.data(), bytes->data(), out.size());
  return Key(out);
}

std::string Key::hex() const { return util::to_hex(m_bytes.data(), m_bytes.size()); }

std::string Key::shard() const { return util::to_hex(m_bytes.data(), 1); }

bool Key::is_zero() const noexcept {
  for (auto b : m_bytes) {
    if (b != 0) {
      return false;
    }
  }
  return true;
}

std::size_t KeyHash::operator()(const Key& key) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, key.bytes().data(), sizeof h);
  return h;
}

}  // namespace kcache
