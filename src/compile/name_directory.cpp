#include "compile/name_directory.hpp"

#include <array>
#include <unordered_map>
#include <unordered_set>

namespace kcache::jit {

namespace {

// Expanded with the main source as the current file, they name it.
constexpr std::array<std::string_view, 2> k_current_file = {"__FILE__", "__FILE_NAME__"};
// Name the main file wherever they are expanded or evaluated.
constexpr std::array<std::string_view, 4> k_main_file = {"__builtin_FILE", "__builtin_source_location",
                                                         "source_location", "__BASE_FILE__"};

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
  std::string storage;
  const std::string_view t = joined(text, storage);
  for (const auto token : k_main_file) {
    if (t.find(token) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

void NameDirectoryCheck::add_reason(std::string why) {
  if (m_reason.empty()) {
    m_reason = std::move(why);
  }
}

void NameDirectoryCheck::add_defines(const FileDirectives& d, bool copy) {
  if (!m_reason.empty()) {
    return;  // decided: because() needs no macro
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

void NameDirectoryCheck::add_source(std::string_view text, const FileDirectives& d) {
  for (const auto& i : d.includes) {
    if (i.computed || !i.angled) {
      add_reason(std::string(i.computed ? "the source's computed include " : "the source's quoted include ") +
                 "'" + i.name + "' may search it");
      break;
    }
  }
  if (d.names_main_file) {
    add_reason("the source names __builtin_FILE, __builtin_source_location, source_location or __BASE_FILE__");
  }
  add_defines(d, true);
  std::string storage;
  std::unordered_set<std::string_view> seen;
  for_each_identifier(joined(text, storage), [&](std::string_view id) {
    if (seen.insert(id).second) {
      m_source_identifiers.emplace_back(id);
    }
  });
}

void NameDirectoryCheck::add_command_line(std::string_view define) {
  const auto eq = define.find('=');
  const std::string& name = m_owned.emplace_back(define.substr(0, std::min(eq, define.find('('))));
  const std::string& body = m_owned.emplace_back(eq == std::string_view::npos ? "" : define.substr(eq + 1));
  m_defines.emplace_back(name, body);
  m_command_line_bodies.push_back(body);
  if (mentions_main_file_anywhere(define)) {
    add_reason("the option -D" + std::string(define) + " names the main file");
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
    add_reason("the in-memory header " + name + " names the main file");
  }
  add_defines(d, true);
}

void NameDirectoryCheck::add_header(const std::string& path, const FileDirectives& d) {
  if (d.names_main_file) {
    add_reason(path + " names __builtin_FILE, __builtin_source_location, source_location or __BASE_FILE__");
  }
  add_defines(d, false);
}

std::string NameDirectoryCheck::because() const {
  if (!m_reason.empty()) {
    return m_reason;
  }
  // Every macro that may expand to __FILE__: a fixed point over the macros
  // whose body names one, whatever #if their definition sits under.
  std::unordered_map<std::string_view, std::vector<std::string_view>> used_by;  // identifier -> macros naming it
  for (const auto& [name, body] : m_defines) {
    for_each_identifier(body, [&, n = name](std::string_view id) { used_by[id].push_back(n); });
  }
  std::unordered_map<std::string_view, std::string_view> expands;  // macro -> what it names that expands
  std::vector<std::string_view> work(k_current_file.begin(), k_current_file.end());
  for (const auto t : k_current_file) {
    expands.emplace(t, t);
  }
  while (!work.empty()) {
    const std::string_view id = work.back();
    work.pop_back();
    const auto it = used_by.find(id);
    if (it == used_by.end()) {
      continue;
    }
    for (const auto macro : it->second) {
      if (expands.emplace(macro, id).second) {
        work.push_back(macro);
      }
    }
  }
  for (const auto& id : m_source_identifiers) {
    if (const auto it = expands.find(id); it != expands.end()) {
      return it->first == it->second ? "the source uses " + id
                                     : "the source uses the macro " + id + ", which may expand __FILE__";
    }
  }
  for (const auto& body : m_command_line_bodies) {
    std::string hit;
    for_each_identifier(body, [&](std::string_view id) {
      if (hit.empty() && expands.contains(id)) {
        hit = id;
      }
    });
    if (!hit.empty()) {
      return "a -D value uses " + hit + ", which may expand __FILE__";
    }
  }
  return {};
}

}  // namespace kcache::jit
