// nvcc/record_text.hpp: the line format of the nvcc integration's files
// (dependency manifests, local memos, the toolchain memo; private).
//
//   line   := tag (" " field)* "\n"
//   tag    := [a-z]+
//   field  := number | string
//   number := [0-9]{1,20}                       (decimal, fits in 64 bits)
//   string := length ":" bytes{length}          (length decimal; bytes may hold anything)
//
// A reader takes exactly what the grammar allows: a wrong tag, a missing or
// extra field, a number out of range, a length past the end or a missing
// newline fails the read (callers then ignore the whole file).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kcache::nvcc {

class RecordWriter {
 public:
  RecordWriter& tag(std::string_view t);
  RecordWriter& num(std::uint64_t n);
  RecordWriter& str(std::string_view s);
  RecordWriter& end();  // the newline
  // Appends `bytes` verbatim (a block whose length a field gave).
  RecordWriter& raw(std::string_view bytes);
  const std::string& text() const noexcept { return m_text; }
  std::string take() { return std::move(m_text); }

 private:
  std::string m_text;
};

class RecordReader {
 public:
  explicit RecordReader(std::string_view text) : m_text(text) {}

  bool at_end() const noexcept { return m_pos >= m_text.size(); }
  // The next line's tag (consumed); nullopt at the end or on a malformed tag.
  std::optional<std::string_view> tag();
  // True (and consumed) when the next line's tag is `t`.
  bool tag_is(std::string_view t);
  std::optional<std::uint64_t> num();
  std::optional<std::string_view> str();
  // The end of the line: true when the newline is next (and consumed).
  bool end();
  // The next `n` bytes verbatim.
  std::optional<std::string_view> raw(std::size_t n);
  // Where the reader is, to resume from or to digest what was read.
  std::size_t position() const noexcept { return m_pos; }

 private:
  bool space();
  std::string_view m_text;
  std::size_t m_pos = 0;
};

}  // namespace kcache::nvcc
