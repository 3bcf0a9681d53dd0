#include "deps/toolkit_includes.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <mutex>
#include <map>
#include <set>

#include "deps/memo_writer.hpp"
#include "deps/user_memo.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"
#include "util/single_threaded.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-toolkit-includes 3\n";
constexpr std::size_t k_max_memo_bytes = 64u << 20;

bool get_str(std::string_view t, std::size_t& i, std::string& s) {
  std::size_t n = 0;
  const auto r = std::from_chars(t.data() + i, t.data() + t.size(), n);
  if (r.ec != std::errc{} || r.ptr == t.data() + t.size() || *r.ptr != ':') {
    return false;
  }
  i = static_cast<std::size_t>(r.ptr - t.data()) + 1;
  if (n > t.size() - i) {
    return false;
  }
  s.assign(t.substr(i, n));
  i += n;
  return true;
}

bool get_lit(std::string_view t, std::size_t& i, std::string_view s) {
  if (t.substr(i, s.size()) != s) {
    return false;
  }
  i += s.size();
  return true;
}

struct Raw {
  std::map<std::string, std::vector<std::string>, std::less<>> names_of;
  std::vector<MacroDefinition> defines;
  std::optional<MacroTable> table;  // `defines` indexed, when a scan built it
};

std::optional<Raw> parse(std::string_view t) {
  Raw raw;
  std::size_t i = 0;
  if (!get_lit(t, i, k_magic)) {
    return std::nullopt;
  }
  std::string s;
  while (get_lit(t, i, "file ")) {
    std::string file;
    if (!get_str(t, i, file) || !get_lit(t, i, "\n") || file.empty()) {
      return std::nullopt;
    }
    auto& names = raw.names_of[file];
    while (get_lit(t, i, "name ")) {
      if (!get_str(t, i, s) || !get_lit(t, i, "\n") || s.empty()) {
        return std::nullopt;
      }
      names.push_back(s);
    }
  }
  while (get_lit(t, i, "def ")) {
    MacroDefinition d;
    if (get_lit(t, i, "f ")) {
      d.function_like = true;
    } else if (!get_lit(t, i, "o ")) {
      return std::nullopt;
    }
    if (!get_str(t, i, d.name) || !get_lit(t, i, " ") || !get_str(t, i, d.params) || !get_lit(t, i, " ") ||
        !get_str(t, i, d.body) || !get_lit(t, i, "\n") || d.name.empty()) {
      return std::nullopt;
    }
    raw.defines.push_back(std::move(d));
  }
  if (!get_lit(t, i, "end\n") || i != t.size()) {
    return std::nullopt;
  }
  return raw;
}

std::string serialize(const std::map<std::string, std::vector<std::string>, std::less<>>& names_of,
                      const std::vector<MacroDefinition>& defines) {
  constexpr std::size_t k_room = 32;  // a record's words and length prefixes
  std::size_t size = k_magic.size() + k_room;
  for (const auto& [file, names] : names_of) {
    size += k_room + file.size();
    for (const auto& n : names) {
      size += k_room + n.size();
    }
  }
  for (const auto& d : defines) {
    size += k_room + d.name.size() + d.params.size() + d.body.size();
  }
  std::string out;
  out.reserve(size);
  out += k_magic;
  for (const auto& [file, names] : names_of) {
    out += "file ";
    put_str(out, file);
    out += '\n';
    for (const auto& n : names) {
      out += "name ";
      put_str(out, n);
      out += '\n';
    }
  }
  for (const auto& d : defines) {
    put_define(out, d);
  }
  out += "end\n";
  return out;
}

Raw scan_toolkit(const fs::path& root) {
  Raw raw;
  std::vector<std::pair<std::string, std::string>> computed;  // (file, tokens)
  std::error_code ec;
  const fs::path include = root / "include";
  // The iterator does not enter a symlink to a directory, so every directory
  // it lists is `include` plus real directories: its canonical path is
  // `include`'s (canonicalised once) plus the same components.
  const std::string include_text = include.string();
  const std::string canonical_include = fs::weakly_canonical(include, ec).string();
  ec.clear();
  std::string bytes;  // one buffer for every file: ~2 000 of them, 28 MB in CUDA 13
  std::size_t files = 0;
  for (fs::recursive_directory_iterator it(include, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || ++files > k_max_toolkit_files) {
      continue;
    }
    const std::string& path = it->path().native();
    if (!util::io::read_small_file_into(path, 64u << 20, bytes) || path.compare(0, include_text.size(), include_text) != 0) {
      continue;
    }
    const std::string file = canonical_include + path.substr(include_text.size());
    auto f = scan_file(bytes, MainFileTokens::skip);
    auto& names = raw.names_of[file];
    for (auto& d : f.includes) {
      if (d.computed) {
        computed.emplace_back(file, std::move(d.name));
      } else {
        names.push_back(std::move(d.name));
      }
    }
    for (auto& d : f.defines) {
      raw.defines.push_back(std::move(d));
    }
  }
  // Indexed once: the computed includes need it now, find_define() later.
  MacroTable& table = raw.table.emplace();
  for (const auto& d : raw.defines) {
    table.add(d);
  }
  for (const auto& [file, tokens] : computed) {
    for (auto& n : expand_include(tokens, table).names) {
      raw.names_of[file].push_back(std::move(n.name));
    }
  }
  return raw;
}

std::shared_ptr<const ToolkitIncludes> build(Raw& raw) {
  auto t = std::make_shared<ToolkitIncludes>();
  t->names_of = std::move(raw.names_of);
  t->raw_defines = std::move(raw.defines);
  if (raw.table) {
    t->adopt_index(std::move(*raw.table));
  }
  return t;
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

// The toolkits scanned in this process, by their id.
struct IncludesMemo {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const ToolkitIncludes>> known;
};

IncludesMemo& includes_memo() {
  static auto* m = new IncludesMemo();  // NOLINT: process lifetime
  return *m;
}

std::string toolkit_id(const fs::path& root, const std::string& fingerprint) {
  return util::sha256_hex("kcache-toolkit-includes-3\n" + root.string() + "\n" + fingerprint);
}

std::string memo_file_name(const std::string& id) { return "toolkit-" + id.substr(0, 32); }

}  // namespace

bool toolkit_includes_worth_prefetching(const fs::path& root, const std::string& fingerprint, const fs::path& memo_dir,
                                        const fs::path& fallback_dir) {
  IncludesMemo& m = includes_memo();
  const std::string id = toolkit_id(root, fingerprint);
  {
    std::unique_lock lock(m.mutex, std::try_to_lock);
    if (!lock.owns_lock() || m.known.contains(id)) {
      return false;
    }
  }
  if (!util::process_is_single_threaded()) {
    return true;
  }
  for (const fs::path* dir : {&memo_dir, &fallback_dir}) {
    struct stat st {};
    if (!dir->empty() && ::lstat((*dir / memo_file_name(id)).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      return false;
    }
  }
  return true;
}

std::shared_ptr<const ToolkitIncludes> toolkit_includes(const fs::path& root, const std::string& fingerprint,
                                                        const fs::path& memo_dir, const fs::path& fallback_dir,
                                                        const ToolkitReady& ready) {
  IncludesMemo& m = includes_memo();
  auto* memo = &m.known;
  const std::string id = toolkit_id(root, fingerprint);
  std::unique_lock lock(m.mutex);  // one scan per toolkit, even with many threads asking at once
  if (const auto it = memo->find(id); it != memo->end()) {
    return it->second;
  }
  std::optional<Raw> raw;
  const MemoPlaces places{memo_dir, fallback_dir};
  const std::string file = memo_file_name(id);
  if (!places.empty()) {
    if (const auto text = read_memo_file(places, file, k_max_memo_bytes)) {
      raw = parse(*text);
    }
  }
  const bool scanned = !raw;
  if (scanned) {
    raw = scan_toolkit(root);
  }
  auto t = build(*raw);
  (*memo)[id] = t;
  lock.unlock();  // the memo file is written with the result known to every thread
  if (scanned && !places.empty()) {
    if (ready) {
      ready(t);
    }
    const std::string text = serialize(t->names_of, t->raw_defines);
    if (text.size() <= k_max_memo_bytes) {
      (void)write_memo_file(places, file, text);
    }
  }
  return t;
}

void forget_toolkit_includes() {
  IncludesMemo& m = includes_memo();
  std::lock_guard lock(m.mutex);
  m.known.clear();
}

void ToolkitIncludes::adopt_index(MacroTable table) {
  std::call_once(m_indexed, [&] { m_defines = std::move(table); });
}

const std::vector<MacroDefinition>* ToolkitIncludes::find_define(std::string_view name) const {
  std::call_once(m_indexed, [this] {
    for (const auto& d : raw_defines) {
      m_defines.add(d);
    }
  });
  return m_defines.find(name);
}

void reachable_names(const ToolkitIncludes& toolkit, const std::vector<std::string>& entries,
                     const std::vector<std::string>& toolkit_dirs, std::set<std::string>& visited,
                     std::vector<std::string>& names, std::set<std::string>& seen_names) {
  std::vector<std::string> work;
  for (const auto& e : entries) {
    if (visited.insert(e).second) {
      work.push_back(e);
    }
  }
  while (!work.empty()) {
    const std::string file = std::move(work.back());
    work.pop_back();
    const auto it = toolkit.names_of.find(file);
    if (it == toolkit.names_of.end()) {
      continue;
    }
    const std::string dir = parent_of(file);
    for (const auto& n : it->second) {
      if (seen_names.insert(n).second) {
        names.push_back(n);
      }
      auto follow = [&](const std::string& base) {
        const std::string p = n.front() == '/' ? n : fs::path(base + "/" + n).lexically_normal().string();
        if (toolkit.names_of.contains(p) && visited.insert(p).second) {
          work.push_back(p);
        }
      };
      follow(dir);
      for (const auto& d : toolkit_dirs) {
        follow(d);
      }
    }
  }
}

const std::set<std::string, std::less<>>& ToolkitIncludes::location_macros() const {
  std::call_once(m_located, [this] {
    auto ident = [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '_' || u == '$';
    };
    // Who names each identifier: identifier -> the macros whose body holds it.
    std::map<std::string, std::set<std::string>, std::less<>> named_by;
    for (const auto& d : raw_defines) {
      const std::string_view b = d.body;
      for (std::size_t i = 0; i < b.size();) {
        if (!ident(b[i])) {
          ++i;
          continue;
        }
        std::size_t j = i;
        while (j < b.size() && ident(b[j])) {
          ++j;
        }
        named_by[std::string(b.substr(i, j - i))].insert(d.name);
        i = j;
      }
    }
    std::vector<std::string> todo{"__FILE__",        "__BASE_FILE__", "__builtin_FILE", "__builtin_source_location",
                                  "source_location", "assert"};
    while (!todo.empty()) {
      const std::string id = std::move(todo.back());
      todo.pop_back();
      const auto it = named_by.find(id);
      if (it == named_by.end()) {
        continue;
      }
      for (const auto& macro : it->second) {
        if (m_location_macros.insert(macro).second) {
          todo.push_back(macro);
        }
      }
    }
  });
  return m_location_macros;
}

}  // namespace kcache::jit
