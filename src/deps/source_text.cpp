// deps/source_text.cpp: translation phases 1 and 2 for the lexical checks
// (deps/source_text.hpp).
#include "deps/source_text.hpp"

namespace kcache::jit {

namespace {

// The character trigraph `??c` stands for, or 0.
char trigraph_of(char c) {
  switch (c) {
    case '=': return '#';
    case '/': return '\\';
    case '\'': return '^';
    case '(': return '[';
    case ')': return ']';
    case '!': return '|';
    case '<': return '{';
    case '>': return '}';
    case '-': return '~';
    default: return 0;
  }
}

}  // namespace

bool has_trigraph(std::string_view text) {
  for (auto at = text.find("??"); at != std::string_view::npos; at = text.find("??", at + 1)) {
    if (at + 2 < text.size() && trigraph_of(text[at + 2]) != 0) {
      return true;
    }
  }
  return false;
}

std::string translate_trigraphs(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '?' && i + 2 < text.size() && text[i + 1] == '?') {
      if (const char c = trigraph_of(text[i + 2]); c != 0) {
        out += c;
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::string joined_text(std::string_view text) {
  std::string translated;
  if (has_trigraph(text)) {
    translated = translate_trigraphs(text);
    text = translated;
  }
  if (text.find('\\') == std::string_view::npos) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      std::size_t j = i + 1;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\f' ||
                                 text[j] == '\v')) {
        ++j;
      }
      if (j < text.size() && text[j] == '\n') {
        i = j;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

}  // namespace kcache::jit
