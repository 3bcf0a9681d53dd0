// deps/manifest_check.cpp: whether a header manifest still applies: every
// recorded header and directory checked against the disk
// (manifest_still_applies, names_still_apply, manifest_unchanged_since;
// declared in deps/header_manifest.hpp, whose format the manifest's own file,
// deps/header_manifest.cpp, reads and writes).
#include "deps/header_manifest.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "util/clock.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace {

std::atomic<std::uint64_t> g_dir_listings{0};

}  // namespace

std::uint64_t manifest_dir_listings() { return g_dir_listings.load(std::memory_order_relaxed); }

bool names_still_apply(const char* dir, const std::vector<std::pair<std::string, char>>& names, NameCheck how) {
  if (names.empty()) {
    return false;
  }
  if (how == NameCheck::each_name) {
    // What the compiler does: a lookup of each name (search permission is
    // enough, as for its own opens).
    const util::Fd dfd(::open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dfd) {
      return false;
    }
    for (const auto& [name, what] : names) {
      struct stat es {};
      if (what == 'n') {
        // Any entry, a dangling symbolic link included, is a name that exists.
        if (::fstatat(dfd.get(), name.c_str(), &es, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
          return false;  // there, or cannot tell: not the recorded answer
        }
        continue;
      }
      // 'x' / 'f': what the name resolves to (an entry that resolves to
      // nothing decides nothing, as in a listing).
      if (::fstatat(dfd.get(), name.c_str(), &es, 0) == 0 &&
          (what == 'x' ? S_ISREG(es.st_mode) : S_ISDIR(es.st_mode))) {
        return false;
      }
    }
    return true;
  }
  g_dir_listings.fetch_add(1, std::memory_order_relaxed);
  util::Fd dfd(::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) {
    return false;
  }
  DIR* listing = ::fdopendir(::dup(dfd.get()));
  if (listing == nullptr) {
    return false;
  }
  bool ok = true;
  while (const dirent* e = ::readdir(listing)) {
    const std::string_view name = e->d_name;
    const auto it = std::lower_bound(names.begin(), names.end(), name,
                                     [](const auto& p, std::string_view n) { return p.first < n; });
    if (it == names.end() || it->first != name) {
      continue;
    }
    if (it->second == 'n') {
      ok = false;
      break;
    }
    struct stat es {};
    if (::fstatat(dfd.get(), e->d_name, &es, 0) == 0 &&
        (it->second == 'x' ? S_ISREG(es.st_mode) : S_ISDIR(es.st_mode))) {
      ok = false;
      break;
    }
  }
  ::closedir(listing);
  return ok;
}

namespace {

// Whether directory `d` (the `i`th of `m`), whose stat is `st` (`found`: the
// stat succeeded), still decides its names as recorded; `by_names` is set
// when its identity changed and its names were looked at to decide.
bool dir_still_applies(const HeaderManifest& m, std::size_t i, bool found, const struct stat& st, bool& by_names) {
  by_names = false;
  const ManifestDir& d = m.dirs[i];
  if (!found || !S_ISDIR(st.st_mode)) {
    return false;
  }
  if (stamp_of(st) == d.stamp) {
    return true;
  }
  // A lookup parse left the names unparsed: only a changed directory's are read.
  std::optional<std::vector<std::pair<std::string, char>>> lazy;
  if (!m.has_details && i < m.name_ranges.size()) {
    const auto [at, len] = m.name_ranges[i];
    lazy = parse_manifest_names(m.names_block.substr(at, len));
    if (!lazy) {
      return false;
    }
  }
  const auto& names = lazy ? *lazy : d.names;
  if (names.empty()) {
    // Nothing was looked up in it: the record says only which directory the
    // path names (an include directory, a symlink that may move into or out
    // of the toolkit). Its content changing (an output written there) or
    // being too recent to trust decides nothing; another directory does.
    return d.stamp.ino != 0 && static_cast<std::uint64_t>(st.st_dev) == d.stamp.dev &&
           static_cast<std::uint64_t>(st.st_ino) == d.stamp.ino;
  }
  // A lookup of each name where they are few against the directory's size
  // (a build's working directory: thousands of entries, a handful of names).
  const NameCheck how =
      names.size() <= std::max(k_names_looked_up, static_cast<std::size_t>(st.st_size) / k_dir_bytes_per_lookup)
          ? NameCheck::each_name
          : NameCheck::listing;
  by_names = true;
  return names_still_apply(d.path.c_str(), names, how);
}
}  // namespace

namespace {

// `rest` when `path` is strictly below directory `dir` ("a/b/c" below "a":
// "b/c"); empty otherwise. Resolving `rest` from `dir`'s descriptor walks the
// same components the kernel walks for `path` (".." and symlinks included),
// only fewer of them.
std::string_view below(std::string_view path, std::string_view dir) {
  if (dir.empty() || path.size() <= dir.size() || path.substr(0, dir.size()) != dir ||
      (dir.back() != '/' && path[dir.size()] != '/')) {
    return {};
  }
  std::string_view rest = path.substr(dir.size());
  while (!rest.empty() && rest.front() == '/') {
    rest.remove_prefix(1);  // "a//b": relative, never absolute
  }
  return rest;
}

// The directories one check opened, by path (views into the manifest).
class OpenedDirs {
 public:
  // Opens `path` (a path string of the manifest: `rest` is a suffix of it, so
  // it is NUL-terminated) relative to `at`; -1 when it cannot be opened.
  // `real`, when given, is set to whether `rest` named a directory that is no
  // symbolic link (it is tried without following one first).
  int open(std::string_view path, int at, const char* rest, bool* real = nullptr) {
    util::Fd fd;
    if (real != nullptr) {
      ++m_calls;
      fd = util::Fd(::openat(at, rest, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      *real = static_cast<bool>(fd);
    }
    if (!fd) {
      ++m_calls;
      fd = util::Fd(::openat(at, rest, O_PATH | O_DIRECTORY | O_CLOEXEC));
    }
    if (!fd) {
      return -1;
    }
    const int raw = fd.get();
    m_owned.push_back(std::move(fd));
    m_by_path.emplace(path, raw);
    return raw;
  }
  int find(std::string_view path) const {
    const auto it = m_by_path.find(path);
    return it == m_by_path.end() ? -1 : it->second;
  }
  std::uint64_t calls() const { return m_calls; }

 private:
  std::uint64_t m_calls = 0;  // opens tried
  std::vector<util::Fd> m_owned;
  std::unordered_map<std::string_view, int> m_by_path;
};

}  // namespace

namespace {
std::atomic<std::uint64_t> g_checks_run{0};
std::atomic<std::uint64_t> g_check_calls{0};
}  // namespace

std::uint64_t manifest_checks_run() { return g_checks_run.load(std::memory_order_relaxed); }

std::uint64_t manifest_check_calls() { return g_check_calls.load(std::memory_order_relaxed); }

bool manifest_unchanged_since(const HeaderManifest& m, std::int64_t since_ns) {
  auto unchanged = [since_ns](const std::string& path, const FileStamp& recorded, bool dir) {
    struct stat st {};
    return recorded != FileStamp{} && !is_racy(recorded, since_ns) && ::stat(path.c_str(), &st) == 0 &&
           (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) && stamp_of(st) == recorded;
  };
  for (const auto& d : m.dirs) {
    if (!unchanged(d.path, d.stamp, true)) {
      return false;
    }
  }
  for (const auto& h : m.headers) {
    if (!unchanged(h.path, h.stamp, false)) {
      return false;
    }
  }
  return true;
}

namespace {

// manifest_still_applies(); `stats` counts the stat calls it made, `opened`
// its opens.
bool still_applies(const HeaderManifest& m, const std::vector<bool>* trusted_dirs, OpenedDirs& opened,
                   std::uint64_t& stats, std::vector<RefreshedDir>* refreshed) {
  // The directories holding headers (headers come sorted by path, so those
  // of one directory are mostly neighbours).
  std::unordered_set<std::string_view> header_dirs;
  std::string_view last;
  for (const auto& h : m.headers) {
    const auto slash = h.path.rfind('/');
    if (slash != std::string::npos && slash != 0) {
      const std::string_view dir = std::string_view(h.path).substr(0, slash);
      if (dir != last) {
        header_dirs.insert(dir);
        last = dir;
      }
    }
  }
  // The opened directories above the current one (dirs come mostly sorted),
  // each with its stat when taken here, and whether it is a directory that is
  // no symbolic link opened as one component (`rest` without a slash) of the
  // one below it: "X/.." is then exactly that one, whatever the identities
  // (the kernel resolves ".." after a real directory, a mount point included,
  // to the directory it came from). Over CuPy's tree half the recorded
  // directories are such an "X/..": each is answered with the stat already
  // taken, not a `stat` of its own.
  struct Above {
    std::string_view path;
    int fd = -1;
    bool stated = false;
    struct stat st {};
    bool real_child = false;
  };
  std::vector<Above> above;
  for (std::size_t i = 0; i < m.dirs.size(); ++i) {
    const std::string& path = m.dirs[i].path;
    while (!above.empty() && below(path, above.back().path).empty()) {
      above.pop_back();
    }
    int at = AT_FDCWD;
    const char* rest = path.c_str();
    if (!above.empty()) {
      const std::string_view r = below(path, above.back().path);
      at = above.back().fd;
      rest = r.data();
    }
    const bool trusted = trusted_dirs != nullptr && i < trusted_dirs->size() && (*trusted_dirs)[i];
    // Opened (to resolve what lies below it from its descriptor) when headers
    // are stat'ed in it or two or more recorded directories follow below it;
    // a directory with one below it and no header is stat'ed by its path like
    // the one below: an open and a close cost more than the components they
    // spare (a small tree's `include` above `include/cccl`: 2 calls, not 4).
    const bool keep = header_dirs.contains(path) ||
                      (i + 2 < m.dirs.size() && !below(m.dirs[i + 1].path, path).empty() &&
                       !below(m.dirs[i + 2].path, path).empty());
    struct stat st {};
    bool ok = false;
    // "X/.." where X (on top) is a real directory opened from the one below it, stat'ed here.
    const Above* parent = nullptr;
    if (!keep && !trusted && above.size() >= 2 && std::string_view(rest) == ".." &&
        above.back().path.size() + 3 == path.size() && above.back().real_child && above[above.size() - 2].stated) {
      parent = &above[above.size() - 2];
    }
    if (parent != nullptr) {
      st = parent->st;
      ok = true;
    } else if (keep) {
      const bool one_component = at != AT_FDCWD && std::strchr(rest, '/') == nullptr &&
                                 std::string_view(rest) != ".." && std::string_view(rest) != ".";
      bool real = false;
      const int fd = opened.open(path, at, rest, one_component ? &real : nullptr);
      stats += fd >= 0 && !trusted ? 1 : 0;
      ok = fd >= 0 && (trusted || ::fstat(fd, &st) == 0);
      if (fd >= 0) {
        above.push_back({path, fd, ok && !trusted, st, real});
      }
    } else if (!trusted) {
      ++stats;
      ok = ::fstatat(at, rest, &st, 0) == 0;
    }
    bool by_names = false;
    if (!trusted && !dir_still_applies(m, i, ok, st, by_names)) {
      return false;
    }
    if (refreshed != nullptr && by_names) {
      // Judged by its names: its identity now holds for them when no change
      // came between that stat and a second one (a change sets its times to
      // the present, past a non-racy stamp).
      const FileStamp now = stamp_of(st);
      struct stat again {};
      ++stats;
      if (!is_racy(now, util::realtime_ns()) && ::fstatat(at, rest, &again, 0) == 0 && S_ISDIR(again.st_mode) &&
          stamp_of(again) == now) {
        refreshed->push_back({i, now});
      }
    }
  }
  // Each header stat'ed relative to its directory, which spares the kernel
  // walking every long path again.
  std::string_view dir;
  int dir_fd = -1;
  for (const auto& h : m.headers) {
    const auto slash = h.path.rfind('/');
    struct stat st {};
    int rc = 0;
    ++stats;
    if (slash == std::string::npos || slash == 0) {
      rc = ::stat(h.path.c_str(), &st);
    } else {
      if (const std::string_view d = std::string_view(h.path).substr(0, slash); d != dir || dir_fd < 0) {
        dir = d;
        dir_fd = opened.find(d);
        if (dir_fd < 0) {
          dir_fd = opened.open(d, AT_FDCWD, std::string(d).c_str());
          if (dir_fd < 0) {
            return false;
          }
        }
      }
      rc = ::fstatat(dir_fd, h.path.c_str() + slash + 1, &st, 0);
    }
    if (rc != 0 || !S_ISREG(st.st_mode) || !(stamp_of(st) == h.stamp)) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool manifest_still_applies(const HeaderManifest& m, const std::vector<bool>* trusted_dirs,
                            std::vector<RefreshedDir>* refreshed) {
  OpenedDirs opened;
  std::uint64_t stats = 0;
  const bool ok = still_applies(m, trusted_dirs, opened, stats, refreshed);
  if (!ok && refreshed != nullptr) {
    refreshed->clear();
  }
  g_checks_run.fetch_add(1, std::memory_order_relaxed);
  g_check_calls.fetch_add(stats + opened.calls(), std::memory_order_relaxed);
  return ok;
}

std::shared_ptr<const HeaderManifest> still_applying(std::shared_ptr<const HeaderManifest> m,
                                                     const std::vector<bool>* trusted_dirs) {
  std::vector<RefreshedDir> refreshed;
  if (!manifest_still_applies(*m, trusted_dirs, &refreshed)) {
    return nullptr;
  }
  if (!refreshed.empty()) {
    m = std::make_shared<const HeaderManifest>(with_refreshed_dirs(*m, refreshed));
  }
  return m;
}

HeaderManifest with_refreshed_dirs(const HeaderManifest& m, const std::vector<RefreshedDir>& refreshed) {
  HeaderManifest copy = m;
  for (const auto& r : refreshed) {
    if (r.index < copy.dirs.size()) {
      copy.dirs[r.index].stamp = r.stamp;
    }
  }
  return copy;
}

}  // namespace kcache::jit
