#include "nvcc/path_rewrite.hpp"

namespace kcache::nvcc {

std::string PathRewrite::to_key(std::string_view text) const {
  if (!active()) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = text.find(m_base, pos);
    if (at == std::string_view::npos) {
      out.append(text.substr(pos));
      return out;
    }
    const std::size_t end = at + m_base.size();
    const bool whole = end == text.size() || text[end] == '/' || text[end] == ',';
    out.append(text.substr(pos, at - pos));
    if (whole) {
      out += k_marker;
    } else {
      out.append(m_base);  // /home/ab is not under /home/a
    }
    pos = end;
  }
}

std::string PathRewrite::expand(std::string_view text) const {
  if (!active() || text.find(k_marker) == std::string_view::npos) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size() + m_base.size());
  for (const char c : text) {
    if (c == k_marker) {
      out += m_base;
    } else {
      out += c;
    }
  }
  return out;
}

std::string PathRewrite::unusable_because(const std::string& base) {
  for (const char c : base) {
    if (c == ' ' || c == '\t' || c == '#' || c == '$' || c == ':' || c == '\\' || c == '\n' || c == k_marker ||
        c == ',') {
      return "base_dir holds a character a dependency file or an option list escapes";
    }
  }
  return {};
}

}  // namespace kcache::nvcc
