#include "kcache/payload.hpp"

#include <cstdio>
#include <ostream>
#include <utility>

namespace kcache {

Payload::Payload(std::string bytes) {
  if (bytes.empty()) {
    return;
  }
  // The string object lives in the shared block; its buffer (moved, not
  // copied) ends in the NUL byte every std::string keeps.
  auto owner = std::make_shared<const std::string>(std::move(bytes));
  m_size = owner->size();
  m_bytes = std::shared_ptr<const char>(owner, owner->data());
}

Payload Payload::adopt(std::shared_ptr<const void> owner, std::string_view bytes) noexcept {
  Payload p;
  if (!bytes.empty()) {
    p.m_size = bytes.size();
    p.m_bytes = std::shared_ptr<const char>(std::move(owner), bytes.data());
  }
  return p;
}

std::ostream& operator<<(std::ostream& os, const Payload& payload) {
  os << "Payload(" << payload.size() << " bytes: \"";
  constexpr std::size_t k_shown = 48;
  for (std::size_t i = 0; i < payload.size() && i < k_shown; ++i) {
    const auto c = static_cast<unsigned char>(payload[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      os << static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      os << hex;
    }
  }
  return os << (payload.size() > k_shown ? "\"...)" : "\")");
}

}  // namespace kcache
