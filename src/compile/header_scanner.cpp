#include "compile/header_scanner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

// Finds the next character strip_comments must look at (backslash, slash,
// quote, apostrophe); everything between is copied in one run. One memchr
// cursor per character, each moving only forward, keeps this linear.
class SpecialFinder {
 public:
  explicit SpecialFinder(std::string_view text) : m_text(text) {
    for (std::size_t k = 0; k < k_chars.size(); ++k) {
      m_next[k] = locate(k, 0);
    }
  }
  // Returns the position of the first special character at or after `from`, or the size.
  std::size_t next(std::size_t from) {
    std::size_t best = m_text.size();
    for (std::size_t k = 0; k < k_chars.size(); ++k) {
      if (m_next[k] < from) {
        m_next[k] = locate(k, from);
      }
      best = std::min(best, m_next[k]);
    }
    return best;
  }

 private:
  static constexpr std::array<char, 4> k_chars{'\\', '/', '"', '\''};
  std::size_t locate(std::size_t k, std::size_t from) const {
    if (from >= m_text.size()) {
      return m_text.size();
    }
    const void* hit = std::memchr(m_text.data() + from, k_chars[k], m_text.size() - from);
    return hit == nullptr ? m_text.size() : static_cast<std::size_t>(static_cast<const char*>(hit) - m_text.data());
  }
  std::string_view m_text;
  std::array<std::size_t, 4> m_next{};
};

// Removes comments (keeping string and character literals) and joins
// backslash-newline continuations; newlines are kept so lines still count.
std::string strip_comments(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  std::size_t i = 0;
  const std::size_t n = in.size();
  SpecialFinder specials(in);
  while (i < n) {
    // Copy the run of ordinary characters up to the next special one at once:
    // keying a large source must cost little more than hashing it.
    const std::size_t run_end = specials.next(i);
    if (run_end > i) {
      out.append(in.data() + i, run_end - i);
      i = run_end;
      continue;
    }
    const char c = in[i];
    if (c == '\\' && i + 1 < n && in[i + 1] == '\n') {
      i += 2;
      continue;
    }
    if (c == '\\' && i + 2 < n && in[i + 1] == '\r' && in[i + 2] == '\n') {
      i += 3;
      continue;
    }
    if (c == '/' && i + 1 < n && in[i + 1] == '/') {
      while (i < n && in[i] != '\n') {
        // A continuation extends a line comment.
        if (in[i] == '\\' && i + 1 < n && in[i + 1] == '\n') {
          i += 2;
          continue;
        }
        ++i;
      }
      out.push_back(' ');
      continue;
    }
    if (c == '/' && i + 1 < n && in[i + 1] == '*') {
      i += 2;
      while (i < n && !(in[i] == '*' && i + 1 < n && in[i + 1] == '/')) {
        if (in[i] == '\n') {
          out.push_back('\n');
        }
        ++i;
      }
      i = std::min(n, i + 2);
      out.push_back(' ');
      continue;
    }
    if (c == '"' || c == '\'') {
      // Raw strings (R"x(...)x") are rare in kernels; a quote inside one only
      // makes the scan see more directives, never fewer: literals below are
      // copied, and directives are looked for at line starts only.
      out.push_back(c);
      ++i;
      while (i < n && in[i] != c && in[i] != '\n') {
        if (in[i] == '\\' && i + 1 < n) {
          out.push_back(in[i++]);
        }
        out.push_back(in[i++]);
      }
      if (i < n && in[i] == c) {
        out.push_back(in[i++]);
      }
      continue;
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Parses `"name"` or `<name>` at `s`; returns false when neither.
bool parse_header_name(std::string_view s, IncludeDirective& d) {
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) {
    ++i;
  }
  if (i >= s.size()) {
    return false;
  }
  const char open = s[i];
  const char close = open == '"' ? '"' : (open == '<' ? '>' : '\0');
  if (close == '\0') {
    return false;
  }
  const auto end = s.find(close, i + 1);
  if (end == std::string_view::npos || end == i + 1) {
    return false;
  }
  d.name = std::string(s.substr(i + 1, end - i - 1));
  d.angled = open == '<';
  return true;
}

}  // namespace

std::vector<IncludeDirective> find_directives(std::string_view text, std::string* computed) {
  std::vector<IncludeDirective> out;
  const std::string clean = strip_comments(text);
  std::string_view all(clean);
  std::size_t line_no = 0;
  std::size_t pos = 0;
  auto note_computed = [&](std::string_view what) {
    if (computed != nullptr && computed->empty()) {
      *computed = "line " + std::to_string(line_no) + ": " + std::string(what);
    }
  };
  while (pos <= all.size()) {
    ++line_no;
    auto eol = all.find('\n', pos);
    if (eol == std::string_view::npos) {
      eol = all.size();
    }
    std::string_view line = all.substr(pos, eol - pos);
    pos = eol + 1;
    std::size_t i = 0;
    while (i < line.size() && is_space(line[i])) {
      ++i;
    }
    if (i < line.size() && line[i] == '#') {
      ++i;
      while (i < line.size() && is_space(line[i])) {
        ++i;
      }
      std::size_t j = i;
      while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) != 0 || line[j] == '_')) {
        ++j;
      }
      const std::string_view word = line.substr(i, j - i);
      if (word == "include" || word == "include_next" || word == "import") {
        IncludeDirective d;
        if (parse_header_name(line.substr(j), d)) {
          out.push_back(std::move(d));
        } else {
          note_computed("#" + std::string(word) + " without a literal file name");
        }
      }
    }
    // __has_include("x") / __has_include(<x>) anywhere on the line.
    for (std::size_t h = line.find("__has_include"); h != std::string_view::npos;
         h = line.find("__has_include", h + 1)) {
      std::size_t k = h + 13;
      if (line.substr(k, 5) == "_next") {
        k += 5;
      }
      while (k < line.size() && is_space(line[k])) {
        ++k;
      }
      IncludeDirective d;
      if (k < line.size() && line[k] == '(' && parse_header_name(line.substr(k + 1), d)) {
        out.push_back(std::move(d));
      } else if (k < line.size() && (std::isalnum(static_cast<unsigned char>(line[k])) != 0 || line[k] == '_')) {
        // Part of a longer identifier (e.g. __has_include_x): not the operator.
      } else if (k >= line.size() || line[k] != ')') {
        note_computed("__has_include without a literal file name");
      }
    }
    if (eol == all.size()) {
      break;
    }
  }
  return out;
}

namespace {

struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const struct stat& st) {
  FileStamp s;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return s;
}

struct MemoEntry {
  FileStamp stamp;
  std::string sha256;
  std::vector<IncludeDirective> directives;
  std::string computed;
};

std::mutex g_memo_mutex;
std::map<std::string, MemoEntry>& memo() {
  static auto* m = new std::map<std::string, MemoEntry>();  // NOLINT: process lifetime
  return *m;
}
std::map<std::string, std::string>& canonical_memo() {
  static auto* m = new std::map<std::string, std::string>();  // NOLINT: process lifetime
  return *m;
}

// Reads `path` (a regular file that exists) and fills `entry`.
Result<void> load(const std::string& path, MemoEntry& entry) {
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
    entry.stamp = stamp_of(after);
    entry.sha256 = util::sha256_hex(bytes);
    entry.computed.clear();
    entry.directives = find_directives(bytes, &entry.computed);
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

}  // namespace

Result<ScanResult> scan_headers(const ScanInput& input) {
  ScanResult result;
  const std::string toolkit_root = input.toolkit_root.string();
  std::set<std::string> include_dirs_in_toolkit;
  for (const auto& d : input.include_dirs) {
    if (!toolkit_root.empty()) {
      const auto c = canonical_dir(d);
      if (c == toolkit_root || under(c, toolkit_root)) {
        include_dirs_in_toolkit.insert(d);
      }
    }
  }
  std::map<std::string, std::string> found;  // path -> sha256
  std::set<std::string> memory_done;
  struct Work {
    std::vector<IncludeDirective> directives;
    std::vector<std::string> includer_dirs;
    std::string where;
  };
  std::deque<Work> work;

  std::vector<std::string> main_dirs{dir_of(input.program_name)};
  if (!input.source_path.empty()) {
    main_dirs.push_back(dir_of(input.source_path));
  }
  {
    Work w;
    std::string computed;
    w.directives = find_directives(input.source, &computed);
    if (!computed.empty()) {
      result.not_cacheable = input.program_name + " " + computed;
      return result;
    }
    for (const auto& p : input.pre_includes) {
      w.directives.push_back({p, false});
    }
    w.includer_dirs = main_dirs;
    w.where = input.program_name;
    work.push_back(std::move(w));
  }

  while (!work.empty()) {
    Work w = std::move(work.front());
    work.pop_front();
    for (const auto& d : w.directives) {
      // In-memory headers win over files (NVRTC looks them up by exact name).
      bool in_memory = false;
      if (input.memory_headers != nullptr) {
        for (const auto& h : *input.memory_headers) {
          if (h.name == d.name) {
            in_memory = true;
            if (memory_done.insert(h.name).second) {
              Work next;
              std::string computed;
              next.directives = find_directives(h.bytes, &computed);
              if (!computed.empty()) {
                result.not_cacheable = "in-memory header " + h.name + " " + computed;
                return result;
              }
              next.includer_dirs = main_dirs;
              next.includer_dirs.push_back(dir_of(h.name));
              next.where = h.name;
              work.push_back(std::move(next));
            }
            break;
          }
        }
      }
      if (in_memory) {
        continue;
      }
      std::vector<std::pair<std::string, bool>> candidates;  // (path, in toolkit)
      if (!d.name.empty() && d.name.front() == '/') {
        candidates.emplace_back(d.name, false);
      } else {
        for (const auto& dir : w.includer_dirs) {
          candidates.emplace_back(join(dir, d.name), false);
        }
        for (const auto& dir : input.include_dirs) {
          candidates.emplace_back(join(dir, d.name), include_dirs_in_toolkit.contains(dir));
        }
      }
      for (const auto& [path, in_toolkit] : candidates) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
          continue;
        }
        if (in_toolkit) {
          continue;  // covered by the toolkit fingerprint
        }
        if (!toolkit_root.empty()) {
          const auto cdir = canonical_dir(dir_of(path));
          if (cdir == toolkit_root || under(cdir, toolkit_root)) {
            continue;
          }
        }
        if (found.contains(path)) {
          continue;
        }
        MemoEntry entry;
        bool have = false;
        {
          std::lock_guard lock(g_memo_mutex);
          const auto it = memo().find(path);
          if (it != memo().end() && it->second.stamp == stamp_of(st)) {
            entry = it->second;
            have = true;
          }
        }
        if (!have) {
          if (auto r = load(path, entry); !r) {
            return tl::unexpected(r.error());
          }
          std::lock_guard lock(g_memo_mutex);
          memo()[path] = entry;
        }
        found[path] = entry.sha256;
        if (!entry.computed.empty()) {
          result.not_cacheable = path + " " + entry.computed;
          return result;
        }
        Work next;
        next.directives = entry.directives;
        // Quoted includes search the including file's directory; EDG may also
        // search the directories of the files that included it, so take those too.
        next.includer_dirs = {dir_of(path)};
        for (const auto& dir : w.includer_dirs) {
          if (std::find(next.includer_dirs.begin(), next.includer_dirs.end(), dir) == next.includer_dirs.end()) {
            next.includer_dirs.push_back(dir);
          }
        }
        next.where = path;
        work.push_back(std::move(next));
      }
    }
  }
  for (auto& [path, sha] : found) {
    result.headers.push_back({path, sha});
  }
  return result;
}

}  // namespace kcache::jit
