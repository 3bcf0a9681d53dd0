#include "compile/header_scanner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
