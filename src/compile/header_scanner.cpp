#include "compile/header_scanner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "compile/derivation_memo.hpp"
#include "compile/header_manifest.hpp"
#include "compile/working_directory.hpp"
#include "compile/macro_expander.hpp"
#include "compile/toolkit_includes.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

// A manifest whose scan met a computed include that uses identifiers NVRTC
// may predefine: its result is under the manifest named with the predefined
// context too (scan_headers()). Never a real reason (those start with a location).
constexpr std::string_view k_needs_predefined = "=predefined: ";

constexpr std::size_t k_max_memo_manifests = 4096;
constexpr std::size_t k_max_memo_facts = 200000;

std::mutex g_memo_mutex;
// Per-file facts (stamp, digest, directives): only identities that were not racy.
std::map<std::string, ManifestHeader>& facts_memo() {
  static auto* m = new std::map<std::string, ManifestHeader>();  // NOLINT: process lifetime
  return *m;
}
std::map<std::string, std::shared_ptr<const HeaderManifest>>& manifest_memo() {
  static auto* m = new std::map<std::string, std::shared_ptr<const HeaderManifest>>();  // NOLINT: process lifetime
  return *m;
}
std::map<std::string, std::string>& canonical_memo() {
  static auto* m = new std::map<std::string, std::string>();  // NOLINT: process lifetime
  return *m;
}

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Reads `path` (a regular file that exists) and fills `entry`.
Result<void> load(const std::string& path, ManifestHeader& entry) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      return make_errno_error(errno, "open header " + path);
    }
    struct stat before {};
    if (::fstat(fd.get(), &before) != 0) {
      return make_errno_error(errno, "stat header " + path);
    }
    std::string bytes;
    bytes.resize(static_cast<std::size_t>(before.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) {
        continue;
      }
      if (r < 0) {
        return make_errno_error(errno, "read header " + path);
      }
      if (r == 0) {
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    struct stat after {};
    if (::fstat(fd.get(), &after) != 0) {
      return make_errno_error(errno, "stat header " + path);
    }
    if (got != bytes.size() || !(stamp_of(before) == stamp_of(after))) {
      continue;  // changed while being read: read again
    }
    entry.path = path;
    entry.stamp = stamp_of(after);
    entry.sha256 = util::sha256_hex(bytes);
    entry.directives = scan_file(bytes);
    return {};
  }
  return make_error(ErrorCode::io, "header " + path + " keeps changing while kcache reads it");
}

std::string canonical_dir(const std::string& dir) {
  {
    std::lock_guard lock(g_memo_mutex);
    if (const auto it = canonical_memo().find(dir); it != canonical_memo().end()) {
      return it->second;
    }
  }
  std::error_code ec;
  auto c = fs::weakly_canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec).string();
  if (ec) {
    c = dir;
  }
  std::lock_guard lock(g_memo_mutex);
  canonical_memo()[dir] = c;
  return c;
}

bool under(const std::string& path, const std::string& root) {
  return !root.empty() && path.size() > root.size() && path.rfind(root, 0) == 0 && path[root.size()] == '/';
}

std::string join(const std::string& dir, const std::string& name) {
  if (!name.empty() && name.front() == '/') {
    return name;
  }
  if (dir.empty() || dir == ".") {
    return name;
  }
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

void add_field(util::Sha256& h, std::string_view tag, std::string_view value) {
  const std::uint64_t n = value.size();
  h.update(tag);
  h.update(&n, sizeof n);
  h.update(value);
}

// The digest of everything a scan's result depends on besides the files and
// directories it records: the manifest's name.
std::string manifest_key(const ScanInput& in, const std::string& cwd) {
  util::Sha256 h;
  add_field(h, "format", "kcache-header-scan-1");
  add_field(h, "cwd", cwd.empty() ? "?" : cwd);
  add_field(h, "name", in.program_name);
  add_field(h, "source_path", in.source_path);
  const std::array<std::uint8_t, 32> none{};
  const auto sd = in.source_sha256 != none ? in.source_sha256 : util::sha256(in.source);
  add_field(h, "source", std::string_view(reinterpret_cast<const char*>(sd.data()), sd.size()));
  if (in.memory_headers != nullptr) {
    const bool given = in.memory_header_sha256.size() == in.memory_headers->size();
    for (std::size_t i = 0; i < in.memory_headers->size(); ++i) {
      const auto& m = (*in.memory_headers)[i];
      add_field(h, "memory", m.name);
      const auto md = given ? in.memory_header_sha256[i] : util::sha256(m.bytes);
      add_field(h, "bytes", std::string_view(reinterpret_cast<const char*>(md.data()), md.size()));
    }
  }
  for (const auto& d : in.include_dirs) {
    add_field(h, "include", d);
  }
  for (const auto& p : in.pre_includes) {
    add_field(h, "pre_include", p);
  }
  for (const auto& d : in.defines) {
    add_field(h, "define", d);
  }
  add_field(h, "toolkit", in.toolkit_root.string());
  add_field(h, "toolkit_fingerprint", in.toolkit_fingerprint);
  const auto d = h.finish();
  return util::to_hex(d.data(), d.size());
}

ScanResult result_of(const HeaderManifest& m, bool reused) {
  ScanResult r;
  r.not_cacheable = m.not_cacheable;
  r.reused = reused;
  for (const auto& h : m.headers) {
    r.headers.push_back({h.path, h.sha256});
  }
  return r;
}

// One full scan: finds the closure and records what it depends on.
class ClosureScan {
public:
  ClosureScan(const ScanInput& in, const HeaderManifest* previous, bool with_predefined)
      : m_in(in), m_toolkit_root(in.toolkit_root.string()), m_now(now_ns()), m_with_predefined(with_predefined) {
    if (previous != nullptr && previous->has_details) {
      for (const auto& h : previous->headers) {
        m_previous[h.path] = &h;
      }
    }
    for (const auto& d : in.include_dirs) {
      if (!m_toolkit_root.empty()) {
        const auto c = canonical_dir(d);
        if (c == m_toolkit_root || under(c, m_toolkit_root)) {
          m_dirs_in_toolkit.insert(d);
        }
      }
    }
    for (const auto& d : in.defines) {
      m_table.add_command_line(d);
    }
  }

  // Runs the scan; `m_manifest` then holds the result and its dependencies.
  Result<void> run() {
    m_manifest.input.clear();
    m_main_dirs.push_back(dir_of(m_in.program_name));
    if (!m_in.source_path.empty() && dir_of(m_in.source_path) != m_main_dirs.front()) {
      m_main_dirs.push_back(dir_of(m_in.source_path));
    }
    // Include directories are recorded too: one that is a symlink moved into
    // or out of the toolkit is then another directory.
    for (const auto& d : m_in.include_dirs) {
      note_dir_or_ancestor(d);
    }
    {
      FileDirectives f = scan_file(m_in.source);
      for (const auto& p : m_in.pre_includes) {
        f.includes.push_back({p, false, false});
      }
      add_defines(f.defines);
      m_work.push_back({std::move(f.includes), m_main_dirs, m_in.program_name});
    }
    // Every in-memory header is scanned, reached or not: NVRTC gives it to
    // toolkit headers too, which are not scanned (its content is in the key anyway).
    if (m_in.memory_headers != nullptr) {
      for (const auto& h : *m_in.memory_headers) {
        if (m_memory_done.insert(h.name).second) {
          FileDirectives f = scan_file(h.bytes);
          add_defines(f.defines);
          auto dirs = m_main_dirs;
          dirs.push_back(dir_of(h.name));
          m_work.push_back({std::move(f.includes), std::move(dirs), "in-memory header " + h.name});
        }
      }
    }
    for (int round = 0; round < 1000; ++round) {
      while (!m_work.empty()) {
        Work w = std::move(m_work.front());
        m_work.pop_front();
        for (const auto& d : w.directives) {
          if (auto r = resolve(d, w.includer_dirs, w.where); !r) {
            return r;
          }
        }
      }
      if (auto r = check_shadows(); !r) {
        return r;
      }
      const auto version = m_table_version;
      if (m_work.empty()) {
        expand_computed();
      }
      // Predefined macros added by expand_computed() expand everything again.
      if ((m_work.empty() && m_tk_pending.empty() && version == m_table_version) ||
          !m_manifest.not_cacheable.empty()) {
        break;
      }
    }
    for (auto& [path, h] : m_found) {
      m_manifest.headers.push_back(h);
    }
    for (auto& [path, rec] : m_dirs) {
      ManifestDir md{path, rec.first, {}};
      md.names.assign(rec.second.begin(), rec.second.end());
      m_manifest.dirs.push_back(std::move(md));
    }
    return {};
  }

  HeaderManifest& manifest() { return m_manifest; }

private:
  struct Work {
    std::vector<IncludeDirective> directives;
    std::vector<std::string> includer_dirs;
    std::string where;
  };
  struct Computed {
    std::string tokens;
    std::vector<std::string> includer_dirs;
    std::string where;
    std::uint64_t expanded_at = 0;  // m_table_version of the last expansion (0: never)
  };

  void add_defines(const std::vector<MacroDefinition>& defines) {
    for (const auto& d : defines) {
      if (m_table.add(d)) {
        ++m_table_version;
      }
    }
  }

  // A stamp too recent to trust is kept as zero, which never matches.
  FileStamp trusted(const FileStamp& s) const { return is_racy(s, m_now) ? FileStamp{} : s; }

  // Records the identity of directory `dir` (which exists); returns its record.
  std::map<std::string, char>* note_dir(const std::string& dir) {
    if (const auto it = m_dirs.find(dir); it != m_dirs.end()) {
      return &it->second.second;
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return nullptr;
    }
    auto& rec = m_dirs[dir];
    rec.first = trusted(stamp_of(st));
    return &rec.second;
  }

  static std::string base_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }

  static void add_name(std::map<std::string, char>* names, const std::string& name, char what) {
    if (names != nullptr && !name.empty() && name.find('/') == std::string::npos) {
      names->emplace(name, what);
    }
  }

  // `path` is no regular file: records what decides so. When it exists (a
  // directory, a FIFO) its directory must keep it a non-file; when it does
  // not, the deepest existing directory above it must keep lacking the next
  // component (or keep it a non-directory).
  void note_absent(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      add_name(note_dir(dir_of(path)), base_of(path), 'x');
      return;
    }
    std::string p = path;
    char what = 'n';
    while (true) {
      const std::string q = dir_of(p);
      if (q == p) {
        return;
      }
      struct stat qs {};
      if (::stat(q.c_str(), &qs) == 0) {
        if (S_ISDIR(qs.st_mode)) {
          add_name(note_dir(q), base_of(p), what);
          return;
        }
        what = 'f';  // q exists but is no directory: it must stay one
      } else {
        what = 'n';
      }
      p = q;
    }
  }

  // Records directory `dir`, or what decides that it is none.
  void note_dir_or_ancestor(const std::string& dir) {
    const std::string d = dir.empty() ? "." : dir;
    if (note_dir(d) == nullptr) {
      note_absent(d);
    }
  }

  bool in_toolkit_dir(const std::string& path) {
    if (m_toolkit_root.empty()) {
      return false;
    }
    const auto cdir = canonical_dir(dir_of(path));
    return cdir == m_toolkit_root || under(cdir, m_toolkit_root);
  }

  Result<void> resolve(const IncludeDirective& d, const std::vector<std::string>& includer_dirs,
                       const std::string& where) {
    if (d.computed) {
      m_computed.push_back({d.name, includer_dirs, where, 0});
      return {};
    }
    // In-memory headers win over files (NVRTC looks them up by exact name);
    // every one of them is scanned already.
    if (m_in.memory_headers != nullptr) {
      for (const auto& h : *m_in.memory_headers) {
        if (h.name == d.name) {
          return {};
        }
      }
    }
    if (!d.name.empty() && d.name.front() == '/') {
      return consider(d.name, includer_dirs);
    }
    for (const auto& dir : includer_dirs) {
      if (auto r = consider(join(dir, d.name), includer_dirs); !r) {
        return r;
      }
    }
    for (const auto& dir : m_in.include_dirs) {
      if (m_dirs_in_toolkit.contains(dir)) {
        // Covered by the toolkit fingerprint; what it includes in turn is
        // followed inside the toolkit (check_shadows).
        m_tk_pending.push_back(
            fs::path(canonical_dir(dir) + "/" + d.name).lexically_normal().string());
        continue;
      }
      if (auto r = consider(join(dir, d.name), includer_dirs); !r) {
        return r;
      }
    }
    return {};
  }

  // A candidate path: takes it when it is a user header.
  Result<void> consider(const std::string& path, const std::vector<std::string>& includer_dirs) {
    if (m_found.contains(path)) {
      return {};
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      note_absent(path);
      return {};
    }
    if (in_toolkit_dir(path)) {
      // Reached through a path outside the toolkit (a symlink): record the
      // directory, whose identity changes if the link is pointed elsewhere.
      note_dir_or_ancestor(dir_of(path));
      m_tk_pending.push_back(canonical_dir(dir_of(path)) + "/" + base_of(path));
      return {};
    }
    auto facts = facts_for(path, st);
    if (!facts) {
      return tl::unexpected(facts.error());
    }
    add_defines(facts->directives.defines);
    Work next;
    next.directives = facts->directives.includes;
    // Quoted includes search the including file's directory; EDG may also
    // search the directories of the files that included it, so take those too.
    next.includer_dirs = {dir_of(path)};
    for (const auto& dir : includer_dirs) {
      if (std::find(next.includer_dirs.begin(), next.includer_dirs.end(), dir) == next.includer_dirs.end()) {
        next.includer_dirs.push_back(dir);
      }
    }
    next.where = path;
    facts->stamp = trusted(facts->stamp);
    m_found.emplace(path, std::move(*facts));
    m_work.push_back(std::move(next));
    return {};
  }

  // What `path` (whose stat is `st`) holds: from the process memo or the
  // previous manifest when its identity is the same, else read.
  Result<ManifestHeader> facts_for(const std::string& path, const struct stat& st) {
    const FileStamp s = stamp_of(st);
    {
      std::lock_guard lock(g_memo_mutex);
      const auto it = facts_memo().find(path);
      if (it != facts_memo().end() && it->second.stamp == s) {
        return it->second;
      }
    }
    if (const auto it = m_previous.find(path); it != m_previous.end() && it->second->stamp == s) {
      remember(*it->second);
      return *it->second;
    }
    ManifestHeader h;
    if (auto r = load(path, h); !r) {
      return tl::unexpected(r.error());
    }
    remember(h);
    return h;
  }

  void remember(const ManifestHeader& h) {
    if (is_racy(h.stamp, m_now)) {
      return;  // a later write in the same timestamp tick would look unchanged
    }
    std::lock_guard lock(g_memo_mutex);
    if (facts_memo().size() >= k_max_memo_facts) {
      facts_memo().clear();
    }
    facts_memo()[h.path] = h;
  }

  // Follows the toolkit headers reached so far to the names they can include,
  // and checks every user directory for each name not checked there yet.
  Result<void> check_shadows() {
    if (m_toolkit_root.empty()) {
      return {};
    }
    if (!m_tk_pending.empty()) {
      load_toolkit();
      if (m_tk_dirs.empty()) {
        for (const auto& d : m_in.include_dirs) {
          if (m_dirs_in_toolkit.contains(d)) {
            m_tk_dirs.push_back(canonical_dir(d));
          }
        }
      }
      reachable_names(*m_toolkit, m_tk_pending, m_tk_dirs, m_tk_visited, m_tk_names, m_tk_seen);
      m_tk_pending.clear();
    }
    std::vector<std::string> dirs;
    for (const auto& d : m_in.include_dirs) {
      if (!m_dirs_in_toolkit.contains(d)) {
        dirs.push_back(d);
      }
    }
    dirs.insert(dirs.end(), m_main_dirs.begin(), m_main_dirs.end());
    for (const auto& [path, h] : m_found) {
      dirs.push_back(dir_of(path));
    }
    for (const auto& d : dirs) {
      const std::string dd = d.empty() ? "." : d;
      auto [it, fresh] = m_shadow.try_emplace(dd);
      Shadow& sh = it->second;
      if (fresh) {
        const auto c = canonical_dir(dd);
        sh.skip = c == m_toolkit_root || under(c, m_toolkit_root);
        if (!sh.skip) {
          // The directory's identity first, then its listing: an entry added
          // after the stat changes the identity, so the next scan looks again.
          sh.names = note_dir(dd);
          if (sh.names == nullptr) {
            note_absent(dd);
            sh.skip = true;
          } else if (DIR* listing = ::opendir(dd.c_str()); listing != nullptr) {
            while (const dirent* e = ::readdir(listing)) {
              sh.entries.emplace(e->d_name);
            }
            ::closedir(listing);
          }
        }
      }
      if (sh.skip) {
        sh.checked = m_tk_names.size();
        continue;
      }
      for (; sh.checked < m_tk_names.size(); ++sh.checked) {
        const std::string& name = m_tk_names[sh.checked];
        const std::string first = name.substr(0, name.find('/'));
        if (name.front() == '/') {
          continue;  // not found through a directory
        }
        if (first != "." && first != ".." && !sh.entries.contains(first)) {
          sh.names->emplace(first, 'n');  // the directory must keep lacking it
          continue;
        }
        if (auto r = consider(join(dd, name), {dd}); !r) {
          return r;
        }
      }
    }
    return {};
  }

  void load_toolkit() {
    if (!m_toolkit) {
      m_toolkit = toolkit_includes(m_in.toolkit_root, m_in.toolkit_fingerprint, m_in.memo_dir);
    }
  }

  void expand_computed() {
    if (m_toolkit_root.empty()) {
      m_table.fallback = nullptr;
    } else if (!m_table.fallback) {
      m_table.fallback = [this](std::string_view name) -> const std::vector<MacroDefinition>* {
        load_toolkit();
        return m_toolkit->defines.find(name);
      };
    }
    for (auto& c : m_computed) {
      if (c.expanded_at == m_table_version + 1) {
        continue;
      }
      c.expanded_at = m_table_version + 1;
      auto e = expand_include(c.tokens, m_table);
      if (!e.error.empty()) {
        m_manifest.not_cacheable = c.where + ": #include " + c.tokens + ": " + e.error;
        return;
      }
      if (!add_predefined(c, e.identifiers)) {
        return;
      }
      std::vector<IncludeDirective> names;
      for (auto& n : e.names) {
        if (m_expanded.insert({n.name, c.includer_dirs}).second) {
          names.push_back(std::move(n));
        }
      }
      if (!names.empty()) {
        m_work.push_back({std::move(names), c.includer_dirs, c.where});
      }
    }
  }

  // Adds what NVRTC predefines for the `identifiers` computed include `c`
  // looked up, as more definitions (the table's version moves, so every
  // computed include is expanded again). False (not_cacheable set) when that
  // cannot be known, or must be asked in the predefined pass.
  bool add_predefined(const Computed& c, const std::vector<std::string>& identifiers) {
    std::vector<std::string> ask;
    for (const auto& id : identifiers) {
      if (id == "defined" || id == "__VA_ARGS__" || id == "__VA_OPT__" || !may_be_predefined(id) ||
          !m_asked.insert(id).second) {
        continue;
      }
      if (const auto why = unkeyable_macro_reason(id); !why.empty()) {
        m_manifest.not_cacheable = c.where + ": #include " + c.tokens + ": uses " + id + ", and " + std::string(why);
        return false;
      }
      ask.push_back(id);
    }
    if (ask.empty()) {
      return true;
    }
    const std::string where = c.where + ": #include " + c.tokens + ": ";
    if (!m_with_predefined) {
      std::string names;
      for (std::size_t i = 0; i < ask.size() && i < 4; ++i) {
        names += (i == 0 ? "" : ", ") + ask[i];
      }
      m_manifest.not_cacheable = std::string(k_needs_predefined) + where + "uses " + names +
                                 (ask.size() > 4 ? " ..." : "") +
                                 ", which NVRTC may predefine, and kcache cannot ask NVRTC here";
      return false;
    }
    auto answers = ask_predefined(*m_in.predefined, ask);
    if (!answers) {
      m_manifest.not_cacheable = where + "cannot ask NVRTC which of its identifiers it predefines: " +
                                 answers.error().message;
      return false;
    }
    for (const auto& [name, a] : *answers) {
      if (a.kind == PredefinedAnswer::Kind::other) {
        m_manifest.not_cacheable = where + "NVRTC predefines " + name + " as a macro kcache does not expand";
        return false;
      }
      if (a.kind == PredefinedAnswer::Kind::object_like) {
        // The toolkit's definitions stay alternatives once the table has its own.
        if (const auto* known = m_table.find(name)) {
          const auto copy = *known;
          add_defines(copy);
        }
        add_defines({MacroDefinition{name, false, {}, a.value}});
      }
    }
    return true;
  }

  const ScanInput& m_in;
  std::string m_toolkit_root;
  std::int64_t m_now;
  bool m_with_predefined;
  std::set<std::string> m_asked;  // identifiers whose predefinition is known (or being asked)
  std::map<std::string, const ManifestHeader*> m_previous;
  std::set<std::string> m_dirs_in_toolkit;
  std::vector<std::string> m_main_dirs;
  std::set<std::string> m_memory_done;
  std::deque<Work> m_work;
  std::vector<Computed> m_computed;
  std::set<std::pair<std::string, std::vector<std::string>>> m_expanded;
  MacroTable m_table;
  std::uint64_t m_table_version = 0;
  std::map<std::string, ManifestHeader> m_found;
  std::map<std::string, std::pair<FileStamp, std::map<std::string, char>>> m_dirs;
  struct Shadow {
    bool skip = false;
    std::map<std::string, char>* names = nullptr;  // the directory's record in m_dirs
    std::set<std::string, std::less<>> entries;
    std::size_t checked = 0;  // m_tk_names[0, checked) are checked here
  };
  std::map<std::string, Shadow> m_shadow;
  std::shared_ptr<const ToolkitIncludes> m_toolkit;
  std::vector<std::string> m_tk_pending;  // toolkit headers reached, not followed yet
  std::vector<std::string> m_tk_dirs;     // the toolkit include directories, canonical
  std::set<std::string> m_tk_visited;
  std::vector<std::string> m_tk_names;    // names reachable from the toolkit headers reached
  std::set<std::string> m_tk_seen;
  HeaderManifest m_manifest;
};

}  // namespace

namespace {

Result<ScanResult> scan_with_manifest(const ScanInput& input, const std::string& key,
                                      std::shared_ptr<const HeaderManifest>& used, bool with_predefined) {
  std::shared_ptr<const HeaderManifest> previous;
  {
    std::lock_guard lock(g_memo_mutex);
    if (const auto it = manifest_memo().find(key); it != manifest_memo().end()) {
      previous = it->second;
    }
  }
  if (previous && manifest_still_applies(*previous)) {
    used = previous;
    return result_of(*previous, true);
  }
  if (previous && !previous->has_details) {
    previous.reset();
    if (auto full = load_manifest(input.memo_dir, key, ManifestPart::with_details)) {
      previous = std::make_shared<const HeaderManifest>(std::move(*full));
    }
  } else if (!previous) {
    if (auto m = load_manifest(input.memo_dir, key, ManifestPart::lookup)) {
      if (manifest_still_applies(*m)) {
        auto shared = std::make_shared<const HeaderManifest>(std::move(*m));
        std::lock_guard lock(g_memo_mutex);
        if (manifest_memo().size() >= k_max_memo_manifests) {
          manifest_memo().clear();
        }
        manifest_memo()[key] = shared;
        used = shared;
        return result_of(*shared, true);
      }
      // Out of date: its per-header facts still spare re-reading the headers that did not change.
      if (auto full = load_manifest(input.memo_dir, key, ManifestPart::with_details)) {
        previous = std::make_shared<const HeaderManifest>(std::move(*full));
      }
    }
  }
  ClosureScan scan(input, previous.get(), with_predefined);
  if (auto r = scan.run(); !r) {
    return tl::unexpected(r.error());
  }
  HeaderManifest& m = scan.manifest();
  m.input = key;
  ScanResult result = result_of(m, false);
  // Kept even when some identity was too recent to trust: it is recorded as
  // zero, so such a header is re-read next time, and the others are not.
  auto shared = std::make_shared<const HeaderManifest>(std::move(m));
  store_manifest(input.memo_dir, *shared);
  std::lock_guard lock(g_memo_mutex);
  if (manifest_memo().size() >= k_max_memo_manifests) {
    manifest_memo().clear();
  }
  manifest_memo()[key] = shared;
  used = shared;
  return result;
}

}  // namespace

Result<ScanResult> scan_headers(const ScanInput& input) {
  const std::string cwd = current_directory();
  std::shared_ptr<const HeaderManifest> used;
  const std::string key = manifest_key(input, cwd);
  auto result = scan_with_manifest(input, key, used, false);
  if (result && result->not_cacheable.rfind(k_needs_predefined, 0) == 0) {
    // The result depends on what NVRTC predefines for these options: it is
    // kept under a manifest named by the predefined context too.
    if (input.predefined == nullptr) {
      result->not_cacheable.erase(0, k_needs_predefined.size());
      return result;
    }
    used.reset();
    result = scan_with_manifest(input, util::sha256_hex(key + "\npredefined\n" + input.predefined->id), used, true);
  }
  if (result && used && !cwd.empty()) {
    result->checks = reuse_checks(*used, input.toolkit_root.string());
    result->working_directory = cwd;
  }
  return result;
}

std::shared_ptr<const HeaderManifest> reuse_checks(const HeaderManifest& m, const std::string& toolkit_root) {
  auto checks = std::make_shared<HeaderManifest>();
  checks->input = m.input;
  checks->has_details = false;
  for (const auto& h : m.headers) {
    if (h.stamp == FileStamp{}) {
      return nullptr;
    }
    checks->headers.push_back({h.path, h.stamp, h.sha256, {}});
  }
  for (const auto& d : m.dirs) {
    // A relative directory moves with the working directory: always checked.
    const bool in_toolkit = !toolkit_root.empty() && !d.path.empty() && d.path.front() == '/' &&
                            [&] {
                              const auto c = canonical_dir(d.path);
                              return c == toolkit_root || under(c, toolkit_root);
                            }();
    if (!in_toolkit) {
      checks->dirs.push_back(d);
    }
  }
  return checks;
}



std::string canonical_path(const std::string& path) {
  return canonical_dir(path);
}

void forget_scan_memos() {
  {
    std::lock_guard lock(g_memo_mutex);
    facts_memo().clear();
    manifest_memo().clear();
  }
  DerivationMemo::instance().clear();
}

}  // namespace kcache::jit
