#include "deps/name_directory.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace kcache::jit {

namespace {

// Expanded with the main source as the current file, they name it. `assert`
// is NVRTC's own: its built-in header (in libnvrtc-builtins, no #include
// needed) defines it with `__FILE__`, the only such macro there (NVRTC 13.0,
// measured with `strings`; tests/unit/deps/test_name_directory.cpp).
constexpr std::array<std::string_view, 3> k_current_file = {"__FILE__", "__FILE_NAME__", "assert"};
// Name the main file wherever they are expanded or evaluated. One search
// finds them all: `source_location` also finds `__builtin_source_location`.
constexpr std::array<std::string_view, 3> k_main_file = {"__builtin_FILE", "source_location", "__BASE_FILE__"};

// Whether `text` holds one of k_main_file, in one pass (a multi-pattern
// Horspool search, Wu and Manber's, on two-byte blocks): a window of
// k_window bytes (no longer than any token) ends at `i`; its last two bytes
// say how far the next window may move without passing a token's start, and
// only where they end a token's first k_window bytes is a token compared.
// The four memmem passes it replaces read every header of a tree four times.
constexpr std::size_t k_window = 12;

// Built by the compiler into read-only data: a table made at run time was
// 16 pages of fresh memory, zeroed and faulted in by every process whose
// first hit scans a source (a page fault is ~1 us on a virtual machine); in
// the executable's file its pages come from the page cache, a few at a fault.
constexpr std::array<std::uint8_t, 1 << 16> token_shifts() {
  std::array<std::uint8_t, 1 << 16> shift{};
  for (auto& s : shift) {
    s = k_window - 1;
  }
  for (const auto token : k_main_file) {
    for (std::size_t j = 1; j < k_window; ++j) {
      const std::size_t block = static_cast<unsigned char>(token[j - 1]) << 8 | static_cast<unsigned char>(token[j]);
      shift[block] = std::min<std::uint8_t>(shift[block], static_cast<std::uint8_t>(k_window - 1 - j));
    }
  }
  return shift;
}

constexpr std::array<std::uint8_t, 1 << 16> k_token_shifts = token_shifts();

bool holds_a_token(std::string_view text) {
  const auto* t = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = k_window - 1; i < text.size();) {
    const std::uint8_t s = k_token_shifts[static_cast<std::size_t>(t[i - 1]) << 8 | t[i]];
    if (s != 0) {
      i += s;
      continue;
    }
    const std::string_view rest = text.substr(i + 1 - k_window);
    for (const auto token : k_main_file) {
      if (rest.starts_with(token)) {
        return true;
      }
    }
    ++i;
  }
  return false;
}

bool identifier_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '_' || u >= 0x80;
}

// `text` with every backslash-newline removed; `text` itself when it has none.
std::string_view joined(std::string_view text, std::string& storage) {
  if (text.find("\\\n") == std::string_view::npos && text.find("\\\r\n") == std::string_view::npos) {
    return text;
  }
  storage.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
    } else if (text[i] == '\\' && i + 2 < text.size() && text[i + 1] == '\r' && text[i + 2] == '\n') {
      i += 2;
    } else {
      storage += text[i];
    }
  }
  return storage;
}

// Calls `f` with each maximal run of identifier characters of `text` that
// starts with a non-digit (pp-numbers are skipped whole).
template <typename F>
void for_each_identifier(std::string_view text, F&& f) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (!identifier_char(text[i])) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < text.size() && identifier_char(text[i])) {
      ++i;
    }
    if (text[start] < '0' || text[start] > '9') {
      f(text.substr(start, i - start));
    }
  }
}

}  // namespace

bool mentions_main_file_anywhere(std::string_view text) {
  if (holds_a_token(text)) {
    return true;
  }
  // A token split by backslash-newlines lies around one: look there with
  // them joined (a window wider than two splits of the longest token).
  constexpr std::size_t k_before = 64;
  constexpr std::size_t k_after = 128;
  for (const char* p = static_cast<const char*>(std::memchr(text.data(), '\\', text.size())); p != nullptr;) {
    const std::size_t at = static_cast<std::size_t>(p - text.data());
    if (at + 1 < text.size() && (text[at + 1] == '\n' || text[at + 1] == '\r')) {
      const std::size_t from = at > k_before ? at - k_before : 0;
      std::string storage;
      if (holds_a_token(joined(text.substr(from, k_before + k_after), storage))) {
        return true;
      }
    }
    p = at + 1 < text.size() ? static_cast<const char*>(std::memchr(p + 1, '\\', text.size() - at - 1)) : nullptr;
  }
  return false;
}

void NameDirectoryCheck::add_reason(std::string why) {
  if (m_reason.empty()) {
    m_reason = std::move(why);
  }
}

void NameDirectoryCheck::add_doubt(std::string why) {
  if (m_doubt.empty()) {
    m_doubt = std::move(why);
  }
}

void NameDirectoryCheck::doubt_pasting(const std::string& where, const FileDirectives& d) {
  if (!m_doubt.empty()) {
    return;
  }
  for (const auto& def : d.defines) {
    if (def.body.find("##") != std::string::npos) {
      add_doubt(where + " pastes tokens (the macro " + def.name + "), which may form __FILE__ or assert");
      return;
    }
  }
}

void NameDirectoryCheck::add_defines(const FileDirectives& d, bool copy) {
  if (!m_reason.empty()) {
    return;  // decided: no macro list is needed
  }
  for (const auto& def : d.defines) {
    if (copy) {
      const std::string& name = m_owned.emplace_back(def.name);
      const std::string& body = m_owned.emplace_back(def.body);
      m_defines.emplace_back(name, body);
    } else {
      m_defines.emplace_back(def.name, def.body);
    }
  }
}

void NameDirectoryCheck::add_source(const FileDirectives& d) {
  for (const auto& i : d.includes) {
    if (i.computed || !i.angled) {
      add_reason(std::string(i.computed ? "the source's computed include " : "the source's quoted include ") +
                 "'" + i.name + "' may search it");
      break;
    }
  }
}

void NameDirectoryCheck::add_memory_header(const std::string& name, const FileDirectives& d) {
  for (const auto& i : d.includes) {
    if (i.computed || !i.angled) {
      add_reason("the in-memory header " + name + " has the quoted or computed include '" + i.name + "'");
      break;
    }
  }
  if (d.names_main_file) {
    add_doubt("the in-memory header " + name + " names the main file");
  }
  doubt_pasting("the in-memory header " + name, d);
  add_defines(d, true);
}

void NameDirectoryCheck::add_header(const std::string& path, const FileDirectives& d) {
  if (d.names_main_file) {
    add_doubt(path + " names __builtin_FILE, __builtin_source_location, source_location or __BASE_FILE__");
  }
  doubt_pasting(path, d);
  add_defines(d, false);
}

namespace {

// Every macro of `defines` that may expand one of `seeds`: a fixed point over
// a reverse graph (identifier -> macros whose body names it).
std::unordered_set<std::string_view> may_expand(const std::vector<std::pair<std::string_view, std::string_view>>& defines,
                                                const std::vector<std::string_view>& seeds) {
  std::unordered_map<std::string_view, std::vector<std::string_view>> used_by;
  for (const auto& [name, body] : defines) {
    for_each_identifier(body, [&, n = name](std::string_view id) { used_by[id].push_back(n); });
  }
  std::unordered_set<std::string_view> found;
  std::vector<std::string_view> work = seeds;
  std::unordered_set<std::string_view> seen(seeds.begin(), seeds.end());
  while (!work.empty()) {
    const std::string_view id = work.back();
    work.pop_back();
    const auto it = used_by.find(id);
    if (it == used_by.end()) {
      continue;
    }
    for (const auto macro : it->second) {
      if (seen.insert(macro).second) {
        found.insert(macro);
        work.push_back(macro);
      }
    }
  }
  return found;
}

}  // namespace

std::vector<std::string> NameDirectoryCheck::file_macros() const {
  if (!m_reason.empty()) {
    return {};
  }
  const auto found = may_expand(m_defines, {k_current_file.begin(), k_current_file.end()});
  std::vector<std::string> out(found.begin(), found.end());
  std::sort(out.begin(), out.end());
  return out;
}

NameDirectoryVerdict name_directory_verdict(std::string_view source, const std::vector<std::string>& defines,
                                            const std::string& closure_seen, const std::string& closure_doubt,
                                            const std::vector<std::string>& file_macros) {
  using Kind = NameDirectoryClass;
  if (!closure_seen.empty()) {
    return {Kind::matters, closure_seen};
  }
  std::vector<std::string_view> seeds(k_current_file.begin(), k_current_file.end());
  seeds.insert(seeds.end(), file_macros.begin(), file_macros.end());
  // The source's and the command line's own macros that may expand it.
  const FileDirectives d = scan_file(source);
  std::vector<std::pair<std::string_view, std::string_view>> own;
  std::deque<std::string> names;
  std::string doubt = closure_doubt;
  for (const auto& def : d.defines) {
    own.emplace_back(def.name, def.body);
    if (doubt.empty() && def.body.find("##") != std::string::npos) {
      doubt = "the source pastes tokens (the macro " + def.name + "), which may form __FILE__ or assert";
    }
  }
  for (const auto& define : defines) {
    if (doubt.empty() && mentions_main_file_anywhere(define)) {
      doubt = "the option -D" + define + " names the main file";
    }
    if (doubt.empty() && define.find("##") != std::string::npos) {
      doubt = "the option -D" + define + " pastes tokens, which may form __FILE__ or assert";
    }
    const std::string_view v = define;
    const auto eq = v.find('=');
    own.emplace_back(names.emplace_back(v.substr(0, std::min(eq, v.find('(')))),
                     eq == std::string_view::npos ? std::string_view() : v.substr(eq + 1));
  }
  if (const auto found = may_expand(own, seeds); !found.empty()) {
    return {Kind::matters,
            "the macro " + std::string(*found.begin()) + " of the source or the command line may expand __FILE__"};
  }
  const std::unordered_set<std::string_view> expanding(seeds.begin(), seeds.end());
  std::string hit;
  std::string storage;
  for_each_identifier(joined(source, storage), [&](std::string_view id) {
    if (hit.empty() && expanding.contains(id)) {
      hit = id;
    }
  });
  if (!hit.empty()) {
    return {Kind::matters, "the source uses " + hit +
                               (hit == "__FILE__" || hit == "__FILE_NAME__" ? "" : ", which may expand __FILE__")};
  }
  if (doubt.empty() && mentions_main_file_anywhere(source)) {
    doubt = "the source names __builtin_FILE, __builtin_source_location, source_location or __BASE_FILE__";
  }
  if (!doubt.empty()) {
    return {Kind::may_matter, doubt};
  }
  return {};
}

}  // namespace kcache::jit
