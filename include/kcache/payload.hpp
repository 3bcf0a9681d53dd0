// kcache/payload.hpp: an artifact's bytes, shared and immutable.
//
// A Payload holds bytes that never change once it is made. Copying one
// copies a reference, not the bytes: every copy shares one buffer, which is
// freed when the last copy goes. That is what makes a hit cheap: the memory
// tier, the artifact it returns, a Python `Artifact` and its `view` all hold
// the same buffer, whatever its size.
//
// To change the bytes, make a new Payload (from a std::string, which it takes
// over without copying). The bytes are followed by a NUL byte that size()
// does not count, so c_str() may be handed to APIs that read PTX text.
//
//   Payload p = std::move(bytes);          // takes the string, no copy
//   Payload q = p;                         // shares p's buffer
//   std::string_view v = p;                // borrows the bytes
//   std::string s(p);                      // an owned copy
//
// Thread-safety: a value; const methods may be called from many threads, and
// copies of one Payload may be used and destroyed on any threads.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

namespace kcache {

class Payload {
 public:
  // No bytes.
  Payload() noexcept = default;
  // Takes over `bytes` (moved in: no copy of the bytes).
  Payload(std::string bytes);  // NOLINT(google-explicit-constructor): a payload is its bytes
  Payload(const char* text) : Payload(std::string(text)) {}  // NOLINT(google-explicit-constructor)
  // Copies `bytes`.
  explicit Payload(std::string_view bytes) : Payload(std::string(bytes)) {}

  // Bytes owned by `owner`, shared without a copy: they must stay unchanged
  // and valid while `owner` lives, and `bytes.data()[bytes.size()]` must be a
  // readable NUL byte (see c_str()). For stores that map or read payloads into
  // buffers of their own.
  static Payload adopt(std::shared_ptr<const void> owner, std::string_view bytes) noexcept;

  const char* data() const noexcept { return m_size == 0 ? "" : m_bytes.get(); }
  // data(), which is followed by a NUL byte.
  const char* c_str() const noexcept { return data(); }
  std::size_t size() const noexcept { return m_size; }
  bool empty() const noexcept { return m_size == 0; }
  const char* begin() const noexcept { return data(); }
  const char* end() const noexcept { return data() + m_size; }
  char operator[](std::size_t i) const noexcept { return data()[i]; }

  static constexpr std::size_t npos = std::string_view::npos;
  std::size_t find(std::string_view text, std::size_t pos = 0) const noexcept { return view().find(text, pos); }

  std::string_view view() const noexcept { return {data(), m_size}; }
  operator std::string_view() const noexcept { return view(); }  // NOLINT(google-explicit-constructor)
  explicit operator std::string() const { return std::string(view()); }

  // True when `other` holds the same buffer (a copy of this payload), not
  // only equal bytes.
  bool shares_with(const Payload& other) const noexcept {
    return m_size == other.m_size && m_bytes.get() == other.m_bytes.get();
  }

  // Byte-wise comparisons (also against strings and string views).
  friend bool operator==(const Payload& a, const Payload& b) noexcept {
    return a.shares_with(b) || a.view() == b.view();
  }
  friend bool operator==(const Payload& a, std::string_view b) noexcept { return a.view() == b; }
  friend bool operator==(const Payload& a, const std::string& b) noexcept { return a.view() == b; }
  friend bool operator==(const Payload& a, const char* b) noexcept { return a.view() == std::string_view(b); }

 private:
  std::shared_ptr<const char> m_bytes;  // aliases the owner's buffer
  std::size_t m_size = 0;
};

// Prints the size and the first bytes, escaped (for test failures and logs).
std::ostream& operator<<(std::ostream& os, const Payload& payload);

}  // namespace kcache
