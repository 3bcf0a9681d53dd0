// compile/memo_reader.hpp: a strict cursor over the text of kcache's memo
// files (header manifests, directory listings) (private).
//
// Every read either matches exactly and advances, or fails and leaves the
// position where it was not meaningful: callers give up on the first failure.
// Numbers are decimal without a '+' (std::from_chars: a '-' only for signed
// types); a str is `length ":" bytes`.
//
// Thread-safety: a value; one per parse.
#pragma once

#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>

#include "compile/header_manifest.hpp"

namespace kcache::jit {

class MemoReader {
public:
  explicit MemoReader(std::string_view t) : m_t(t) {}

  bool lit(std::string_view s) {
    if (m_t.substr(m_i, s.size()) != s) {
      return false;
    }
    m_i += s.size();
    return true;
  }

  bool peek(std::string_view s) const { return m_t.substr(m_i, s.size()) == s; }

  template <typename T>
  bool num(T& v) {
    const char* b = m_t.data() + m_i;
    const char* e = m_t.data() + m_t.size();
    if (b == e || *b == '+') {
      return false;
    }
    const auto r = std::from_chars(b, e, v);
    if (r.ec != std::errc{}) {
      return false;
    }
    m_i += static_cast<std::size_t>(r.ptr - b);
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
    for (const char c : h) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
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

private:
  std::string_view m_t;
  std::size_t m_i = 0;
};

}  // namespace kcache::jit
