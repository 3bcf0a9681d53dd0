#include "nvcc/dependency_file.hpp"

namespace kcache::nvcc {

std::optional<DependencyList> parse_dependency_file(std::string_view text) {
  DependencyList list;
  std::string word;
  bool in_word = false;
  bool after_colon = false;
  const auto flush = [&] {
    if (!in_word) {
      return;
    }
    (after_colon ? list.prerequisites : list.targets).push_back(std::move(word));
    word.clear();
    in_word = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char n = text[i + 1];
      if (n == '\n') {  // a continued line
        flush();
        ++i;
        continue;
      }
      if (n == '\r' && i + 2 < text.size() && text[i + 2] == '\n') {
        flush();
        i += 2;
        continue;
      }
      if (n == ' ' || n == '#' || n == '\\' || n == ':') {
        word += n;
        in_word = true;
        ++i;
        continue;
      }
    }
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      word += '$';
      in_word = true;
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r') {
      flush();
      if (after_colon) {
        return list;  // the end of the first rule
      }
      if (!list.targets.empty()) {
        return std::nullopt;  // targets without a colon
      }
      continue;
    }
    if (c == ' ' || c == '\t') {
      flush();
      continue;
    }
    if (c == ':' && !after_colon && (i + 1 >= text.size() || text[i + 1] == ' ' || text[i + 1] == '\t' ||
                                     text[i + 1] == '\n' || text[i + 1] == '\r')) {
      flush();
      after_colon = true;
      continue;
    }
    word += c;
    in_word = true;
  }
  flush();
  if (!after_colon) {
    return std::nullopt;
  }
  return list;
}

}  // namespace kcache::nvcc
