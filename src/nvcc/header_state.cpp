#include "nvcc/header_state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "deps/directive_scanner.hpp"
#include "nvcc/path_rewrite.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace fs = std::filesystem;

namespace {

std::string normalize(const std::string& spelled, const fs::path& cwd) {
  fs::path p(spelled.empty() ? "." : spelled);
  if (p.is_relative()) {
    p = cwd / p;
  }
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') {
    s.pop_back();
  }
  return s;
}

std::string parent_spelled(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir == ".") {
    return name;
  }
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

struct TrieNode {
  std::map<std::string, std::unique_ptr<TrieNode>> children;
};

void insert(TrieNode& root, std::string_view rel) {
  TrieNode* at = &root;
  std::size_t start = 0;
  while (start < rel.size()) {
    const std::size_t slash = std::min(rel.find('/', start), rel.size());
    const std::string part(rel.substr(start, slash - start));
    start = slash + 1;
    if (part.empty() || part == ".") {
      continue;
    }
    auto& child = at->children[part];
    if (!child) {
      child = std::make_unique<TrieNode>();
    }
    at = child.get();
  }
}

// One directory's entries: name -> is a directory. nullopt when it cannot be listed.
using Listing = std::unordered_map<std::string, bool>;

class Lister {
 public:
  const std::optional<Listing>& list(const std::string& dir) {
    auto it = m_cache.find(dir);
    if (it != m_cache.end()) {
      return it->second;
    }
    std::optional<Listing> listing;
    if (DIR* d = ::opendir(dir.c_str())) {
      listing.emplace();
      while (const dirent* e = ::readdir(d)) {
        const std::string_view name = e->d_name;
        if (name == "." || name == "..") {
          continue;
        }
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
          struct stat st {};
          is_dir = ::stat(join(dir, std::string(name)).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        }
        listing->emplace(std::string(name), is_dir);
      }
      ::closedir(d);
    }
    return m_cache.emplace(dir, std::move(listing)).first->second;
  }

 private:
  std::unordered_map<std::string, std::optional<Listing>> m_cache;
};

void walk(const std::string& dir, const TrieNode& node, Lister& lister, std::set<AbsentName>& out, int depth) {
  if (depth > 64) {
    return;
  }
  const auto& listing = lister.list(dir);
  if (!listing) {
    return;
  }
  for (const auto& [name, child] : node.children) {
    if (name == "..") {
      continue;  // not followed (docs/nvcc.md)
    }
    const auto it = listing->find(name);
    if (it == listing->end()) {
      out.insert(AbsentName{dir, name});
    } else if (it->second && !child->children.empty()) {
      walk(join(dir, name), *child, lister, out, depth + 1);
    }
  }
}

}  // namespace

namespace {

struct SearchDir {
  std::string spelled;
  std::string norm;
};

// The search directories, each once (by its lexically normal absolute path).
class DirSet {
 public:
  explicit DirSet(fs::path cwd) : m_cwd(std::move(cwd)) {}
  void add(const std::string& spelled) {
    std::string s = spelled.empty() ? "." : spelled;
    while (s.size() > 1 && s.back() == '/') {
      s.pop_back();
    }
    std::string norm = normalize(s, m_cwd);
    if (m_seen.insert(norm).second) {
      m_dirs.push_back(SearchDir{std::move(s), std::move(norm)});
    }
  }
  const std::vector<SearchDir>& dirs() const noexcept { return m_dirs; }
  const fs::path& cwd() const noexcept { return m_cwd; }

 private:
  fs::path m_cwd;
  std::vector<SearchDir> m_dirs;
  std::unordered_set<std::string> m_seen;
};

// Records where the lookup of `name` under `dir` stops when the path does
// not exist: the deepest existing directory and the first missing component.
void record_lookup(const std::string& dir, std::string_view name, Lister& lister, std::set<AbsentName>& out) {
  std::string at = dir;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t slash = std::min(name.find('/', start), name.size());
    const std::string part(name.substr(start, slash - start));
    const bool last = slash >= name.size();
    start = slash + 1;
    if (part.empty() || part == ".") {
      if (last) {
        return;
      }
      continue;
    }
    if (part == "..") {
      at = parent_spelled(at == "." ? fs::current_path().string() : at);
      continue;
    }
    const auto& listing = lister.list(at);
    if (!listing) {
      return;  // not a readable directory: nothing to record under it
    }
    const auto it = listing->find(part);
    if (it == listing->end()) {
      out.insert(AbsentName{at, part});
      return;
    }
    if (last || !it->second) {
      return;  // the path exists (or runs into a file): nothing is missing here
    }
    at = join(at, part);
  }
}

// A search directory that does not exist could be created with any of the
// names in it: it is recorded as missing in its nearest existing parent.
void record_missing_dir(const std::string& spelled, Lister& lister, std::set<AbsentName>& out) {
  std::string child = spelled;
  for (int up = 0; up < 64; ++up) {
    const std::string parent = parent_spelled(child);
    if (parent == child) {
      return;
    }
    if (lister.list(parent)) {
      const auto slash = child.rfind('/');
      const std::string name = slash == std::string::npos ? child : child.substr(slash + 1);
      if (!name.empty() && name != "." && name != "..") {
        out.insert(AbsentName{parent, name});
      }
      return;
    }
    child = parent;
  }
}

}  // namespace

std::vector<AbsentName> absent_names(const std::vector<std::string>& headers, const std::string& source,
                                     const std::vector<std::string>& search_dirs,
                                     const std::vector<std::string>& pre_includes) {
  std::error_code ec;
  DirSet chain(fs::current_path(ec));
  for (const auto& d : search_dirs) {
    chain.add(d);
  }
  Lister lister;
  std::set<AbsentName> out;
  for (const auto& y : chain.dirs()) {
    if (!lister.list(y.spelled)) {
      record_missing_dir(y.spelled, lister, out);
    }
  }
  // Each directive of each file read, looked up as the preprocessor does: a
  // quoted name in the includer's directory, then (as every name) along the
  // search path; a pre-include in the working directory first.
  DirSet computed(chain.cwd());  // the directories of files with a computed include
  const auto look_up = [&](const std::string& includer_dir, const jit::IncludeDirective& d) {
    if (!d.angled) {
      record_lookup(includer_dir, d.name, lister, out);
    }
    for (const auto& y : chain.dirs()) {
      record_lookup(y.spelled, d.name, lister, out);
    }
  };
  for (const auto& p : pre_includes) {
    look_up(".", jit::IncludeDirective{p, false, false});
  }
  std::vector<std::string> files{source};
  files.insert(files.end(), headers.begin(), headers.end());
  std::string text;
  for (const auto& f : files) {
    if (!util::io::read_small_file_into(f, std::size_t{256} << 20, text)) {
      continue;  // a header that cannot be read is keyed as missing
    }
    std::string computed_at;
    const auto directives = jit::find_directives(text, &computed_at);
    const std::string dir = parent_spelled(f);
    for (const auto& d : directives) {
      if (!d.computed) {
        look_up(dir, d);
      }
    }
    if (!computed_at.empty()) {
      computed.add(dir);
    }
  }
  // A computed include (`#include MACRO`) names what its macros expand to:
  // any header of the list, under its directory or the search path. Every
  // name each header has below a search directory or an includer's directory
  // is looked up there.
  if (!computed.dirs().empty()) {
    DirSet bases(chain.cwd());
    for (const auto& y : chain.dirs()) {
      bases.add(y.spelled);
      computed.add(y.spelled);
    }
    bases.add(parent_spelled(source));
    for (const auto& h : headers) {
      bases.add(parent_spelled(h));
    }
    TrieNode trie;
    for (const auto& h : headers) {
      const std::string norm = normalize(h, chain.cwd());
      for (const auto& x : bases.dirs()) {
        const std::string prefix = x.norm == "/" ? "/" : x.norm + "/";
        if (norm.size() > prefix.size() && norm.compare(0, prefix.size(), prefix) == 0) {
          insert(trie, std::string_view(norm).substr(prefix.size()));
        }
      }
    }
    for (const auto& y : computed.dirs()) {
      if (lister.list(y.spelled)) {
        walk(y.spelled, trie, lister, out, 0);
      }
    }
  }
  return {out.begin(), out.end()};
}

bool still_missing(const std::string& dir, const std::string& name) {
  struct stat st {};
  return ::lstat(join(dir, name).c_str(), &st) != 0;
}

HeaderState header_state(const std::vector<std::string>& headers, const std::vector<AbsentName>& absent,
                         const KnownDigests* known) {
  return header_state(headers, absent, PathRewrite(), known);
}

HeaderState header_state(const std::vector<std::string>& headers, const std::vector<AbsentName>& absent,
                         const PathRewrite& rewrite, const KnownDigests* known) {
  HeaderState state;
  util::Sha256 h;
  state.headers.reserve(headers.size());
  for (const auto& keyed : headers) {
    HeaderFile f;
    f.path = rewrite.expand(keyed);
    f.keyed = keyed;
    const std::string& path = f.path;
    const auto stamp = stamp_of(path);
    if (!stamp) {
      f.sha256 = "missing";
    } else {
      f.stamp = *stamp;
      std::optional<std::string> sha;
      if (known != nullptr) {
        if (const auto it = known->find(path); it != known->end() && it->second.first == *stamp) {
          sha = it->second.second;
        }
      }
      if (!sha) {
        FileStamp read_stamp;
        sha = sha256_of_file(path, &read_stamp);
        if (sha && !(read_stamp == *stamp)) {
          f.stamp = read_stamp;
        }
      }
      f.sha256 = sha ? *sha : "missing";
      state.settled_ns = std::max(state.settled_ns, f.stamp.settled_ns());
    }
    h.update(f.keyed);
    h.update("\0", 1);
    h.update(f.sha256);
    h.update("\n", 1);
    state.headers.push_back(std::move(f));
  }
  h.update("absent\n", 7);
  for (const auto& a : absent) {
    if (!still_missing(rewrite.expand(a.dir), a.name)) {
      const std::string keyed = join(a.dir, a.name);
      ++state.present;
      state.present_names += keyed + "\n";
      h.update(keyed);
      h.update("\n", 1);
    }
  }
  const auto d = h.finish();
  state.digest = util::to_hex(d.data(), d.size());
  return state;
}

}  // namespace kcache::nvcc
