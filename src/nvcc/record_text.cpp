#include "nvcc/record_text.hpp"

namespace kcache::nvcc {

RecordWriter& RecordWriter::tag(std::string_view t) {
  m_text.append(t);
  return *this;
}

RecordWriter& RecordWriter::num(std::uint64_t n) {
  m_text += ' ';
  m_text += std::to_string(n);
  return *this;
}

RecordWriter& RecordWriter::str(std::string_view s) {
  m_text += ' ';
  m_text += std::to_string(s.size());
  m_text += ':';
  m_text.append(s);
  return *this;
}

RecordWriter& RecordWriter::end() {
  m_text += '\n';
  return *this;
}

RecordWriter& RecordWriter::raw(std::string_view bytes) {
  m_text.append(bytes);
  return *this;
}

std::optional<std::string_view> RecordReader::tag() {
  const std::size_t start = m_pos;
  while (m_pos < m_text.size() && m_text[m_pos] >= 'a' && m_text[m_pos] <= 'z') {
    ++m_pos;
  }
  if (m_pos == start || m_pos - start > 32) {
    m_pos = start;
    return std::nullopt;
  }
  return m_text.substr(start, m_pos - start);
}

bool RecordReader::tag_is(std::string_view t) {
  const std::size_t start = m_pos;
  const auto got = tag();
  if (got && *got == t && (m_pos >= m_text.size() || m_text[m_pos] == ' ' || m_text[m_pos] == '\n')) {
    return true;
  }
  m_pos = start;
  return false;
}

bool RecordReader::space() {
  if (m_pos < m_text.size() && m_text[m_pos] == ' ') {
    ++m_pos;
    return true;
  }
  return false;
}

std::optional<std::uint64_t> RecordReader::num() {
  if (!space()) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  std::size_t digits = 0;
  while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
    const auto d = static_cast<std::uint64_t>(m_text[m_pos] - '0');
    if (n > (UINT64_MAX - d) / 10) {
      return std::nullopt;
    }
    n = n * 10 + d;
    ++m_pos;
    ++digits;
  }
  if (digits == 0 || digits > 20) {
    return std::nullopt;
  }
  return n;
}

std::optional<std::string_view> RecordReader::str() {
  const auto len = num();
  if (!len || m_pos >= m_text.size() || m_text[m_pos] != ':') {
    return std::nullopt;
  }
  ++m_pos;
  if (*len > m_text.size() - m_pos) {
    return std::nullopt;
  }
  const auto s = m_text.substr(m_pos, static_cast<std::size_t>(*len));
  m_pos += static_cast<std::size_t>(*len);
  return s;
}

bool RecordReader::end() {
  if (m_pos < m_text.size() && m_text[m_pos] == '\n') {
    ++m_pos;
    return true;
  }
  return false;
}

std::optional<std::string_view> RecordReader::raw(std::size_t n) {
  if (n > m_text.size() - m_pos) {
    return std::nullopt;
  }
  const auto s = m_text.substr(m_pos, n);
  m_pos += n;
  return s;
}

}  // namespace kcache::nvcc
