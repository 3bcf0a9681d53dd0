#include "deps/header_manifest.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <ctime>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "deps/memo_reader.hpp"
#include "deps/memo_writer.hpp"
#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-header-manifest 4 ";
constexpr std::string_view k_details = "details\n";

void put_stamp(std::string& out, const FileStamp& s) {
  put_num(out, s.dev);
  out += ' ';
  put_num(out, s.ino);
  out += ' ';
  put_num(out, s.size);
  out += ' ';
  put_num(out, s.mtime_ns);
  out += ' ';
  put_num(out, s.ctime_ns);
}

// Room for a record: its fixed words, numbers and length prefixes.
constexpr std::size_t k_record_room = 128;

// Reads a directory's name records (`block`: its part of the names block);
// nothing when they are malformed or out of order.
std::optional<std::vector<std::pair<std::string, char>>> parse_names(std::string_view block) {
  MemoReader r(block);
  std::vector<std::pair<std::string, char>> names;
  while (!r.at_end()) {
    const char what = r.peek("n ") ? 'n' : (r.peek("x ") ? 'x' : (r.peek("f ") ? 'f' : '\0'));
    std::string name;
    if (what == '\0' || !r.lit(std::string_view(&what, 1)) || !r.lit(" ") || !r.str(name) || !r.lit("\n") ||
        name.empty() || name.find('/') != std::string::npos || (!names.empty() && names.back().first >= name)) {
      return std::nullopt;  // names are sorted and unique
    }
    names.emplace_back(std::move(name), what);
  }
  return names;
}

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
// stat succeeded), still decides its names as recorded.
bool dir_still_applies(const HeaderManifest& m, std::size_t i, bool found, const struct stat& st) {
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
    lazy = parse_names(m.names_block.substr(at, len));
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
  return names_still_apply(d.path.c_str(), names, how);
}

// Keeps a shard within its caps by removing its oldest manifests.
void trim_shard(const fs::path& shard) {
  struct Item {
    std::string name;
    std::int64_t mtime;
    std::int64_t size;
  };
  std::vector<Item> items;
  DIR* d = ::opendir(shard.c_str());
  if (d == nullptr) {
    return;
  }
  const int dfd = ::dirfd(d);
  std::int64_t total = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    struct stat st {};
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    // A temporary left by a killed writer: gone after an hour.
    if (name.find(".kcache-") != std::string::npos) {
      if (st.st_mtime + 3600 < ::time(nullptr)) {
        ::unlinkat(dfd, name.c_str(), 0);
      }
      continue;
    }
    items.push_back({name, static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                     static_cast<std::int64_t>(st.st_size)});
    total += st.st_size;
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.mtime < b.mtime; });
  std::size_t count = items.size();
  for (const auto& it : items) {
    if (count <= k_max_shard_files && total <= static_cast<std::int64_t>(k_max_shard_bytes)) {
      break;
    }
    ::unlinkat(dfd, it.name.c_str(), 0);
    --count;
    total -= it.size;
  }
  ::closedir(d);
}

}  // namespace

void add_to_header_list(util::Sha256& list, std::string_view path, std::string_view sha256_hex) {
  const std::uint64_t n = path.size();
  list.update(&n, sizeof n);
  list.update(path);
  list.update(sha256_hex);
}

std::string header_list_digest(const std::vector<ManifestHeader>& headers) {
  util::Sha256 list;
  for (const auto& h : headers) {
    add_to_header_list(list, h.path, h.sha256);
  }
  const auto d = list.finish();
  return util::to_hex(d.data(), d.size());
}

FileStamp stamp_of(const struct stat& st) {
  FileStamp s;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return s;
}

bool is_racy(const FileStamp& s, std::int64_t now_ns) {
  return std::max(s.mtime_ns, s.ctime_ns) + k_racy_window_ns >= now_ns;
}

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
                   std::uint64_t& stats) {
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
    const bool keep = header_dirs.contains(path) ||
                      (i + 1 < m.dirs.size() && !below(m.dirs[i + 1].path, path).empty());
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
    if (!trusted && !dir_still_applies(m, i, ok, st)) {
      return false;
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

bool manifest_still_applies(const HeaderManifest& m, const std::vector<bool>* trusted_dirs) {
  OpenedDirs opened;
  std::uint64_t stats = 0;
  const bool ok = still_applies(m, trusted_dirs, opened, stats);
  g_checks_run.fetch_add(1, std::memory_order_relaxed);
  g_check_calls.fetch_add(stats + opened.calls(), std::memory_order_relaxed);
  return ok;
}

std::string serialize_manifest(const HeaderManifest& m) {
  // Every part is sized before it is written: a manifest of CuPy's tree is
  // ~1 MB, and growing it by doubling cost more than writing it (each large
  // allocation first consolidates the heap a scan left full of small blocks).
  std::size_t block_size = 0;
  std::size_t identity_size = 2 * k_record_room + m.input.size() + m.not_cacheable.size() + m.name_directory_seen.size();
  std::size_t details_size = k_details.size() + k_record_room;
  for (const auto& h : m.headers) {
    identity_size += k_record_room + h.sha256.size() + h.path.size();
    details_size += k_record_room + h.path.size();
    for (const auto& i : h.directives.includes) {
      details_size += k_record_room + i.name.size();
    }
    for (const auto& d : h.directives.defines) {
      details_size += k_record_room + d.name.size() + d.params.size() + d.body.size();
    }
  }
  for (const auto& d : m.dirs) {
    identity_size += k_record_room + d.path.size();
    for (const auto& [name, what] : d.names) {
      block_size += k_record_room / 4 + name.size();
    }
  }
  for (const auto& f : m.file_macros) {
    identity_size += k_record_room + f.size();
  }
  std::string out;  // the identity first: its length opens the file
  out.reserve(identity_size + block_size);
  out += "input ";
  out += m.input;
  out += "\nlist ";
  out += m.list.size() == 64 ? m.list : header_list_digest(m.headers);
  out += '\n';
  for (const auto& h : m.headers) {
    out += "header ";
    put_stamp(out, h.stamp);
    out += ' ';
    out += h.sha256;
    out += ' ';
    put_str(out, h.path);
    out += '\n';
  }
  // The name records of every directory, one block: a lookup copies it
  // unparsed, and reads a directory's part only when its identity changed.
  std::string block;
  block.reserve(block_size);
  for (const auto& d : m.dirs) {
    const std::size_t at = block.size();
    for (const auto& [name, what] : d.names) {
      block += what;
      block += ' ';
      put_str(block, name);
      block += '\n';
    }
    out += "dir ";
    put_stamp(out, d.stamp);
    out += ' ';
    put_str(out, d.path);
    out += ' ';
    put_num(out, at);
    out += ' ';
    put_num(out, block.size() - at);
    out += '\n';
  }
  if (!m.not_cacheable.empty()) {
    out += "nc ";
    put_str(out, m.not_cacheable);
    out += '\n';
  }
  if (!m.name_directory_seen.empty()) {
    out += "seen ";
    put_str(out, m.name_directory_seen);
    out += '\n';
  }
  for (const auto& f : m.file_macros) {
    out += "fm ";
    put_str(out, f);
    out += '\n';
  }
  out += "names ";
  put_num(out, block.size());
  out += '\n';
  out += block;
  std::string file;
  file.reserve(k_magic.size() + k_record_room + out.size() + details_size);
  file += k_magic;
  put_num(file, out.size());
  file += '\n';
  file += out;
  file += k_details;
  for (const auto& h : m.headers) {
    file += "fact ";
    put_str(file, h.path);
    file += '\n';
    if (h.directives.names_main_file) {
      file += "loc\n";
    }
    for (const auto& i : h.directives.includes) {
      file += i.computed ? "inc c " : (i.angled ? "inc a " : "inc q ");
      put_str(file, i.name);
      file += '\n';
    }
    for (const auto& d : h.directives.defines) {
      put_define(file, d);
    }
  }
  file += "end\n";
  return file;
}

namespace {

// Reads the first line of a manifest: the length of its identity part;
// nothing when it is not a version-3 first line.
std::optional<std::size_t> identity_length(MemoReader& r) {
  std::size_t n = 0;
  if (!r.lit(k_magic) || !r.num(n) || !r.lit("\n") || n > k_max_manifest_bytes) {
    return std::nullopt;
  }
  return n;
}

// Parses `text` (see parse_manifest()); `block_at` is set to where the
// names block starts in `text`.
std::optional<HeaderManifest> parse_text(std::string_view text, std::string_view input, ManifestPart part,
                                         std::size_t& block_at) {
  if (text.size() > k_max_manifest_bytes) {
    return std::nullopt;
  }
  MemoReader r(text);
  HeaderManifest m;
  const auto identity = identity_length(r);
  if (!identity || *identity > text.size() - r.pos()) {
    return std::nullopt;
  }
  const std::size_t identity_end = r.pos() + *identity;
  if (!r.lit("input ") || !r.hex64(m.input) || !r.lit("\n") || m.input != input || !r.lit("list ") ||
      !r.hex64(m.list) || !r.lit("\n")) {
    return std::nullopt;
  }
  // About one header per 160 bytes of identity (a path, a stamp, a digest):
  // one allocation instead of a dozen regrowths on a large tree.
  m.headers.reserve(std::min<std::size_t>(*identity / 160, 1u << 16));
  while (r.peek("header ")) {
    FileStamp stamp;
    std::string_view sha256;
    std::string_view path;
    if (!r.lit("header ") || !r.stamp(stamp) || !r.lit(" ") || !r.hex64(sha256) || !r.lit(" ") || !r.str(path) ||
        !r.lit("\n") || path.empty()) {
      return std::nullopt;
    }
    // Built in place: the two strings are the only allocations per header.
    m.headers.emplace_back(std::string(path), stamp, std::string(sha256), FileDirectives{});
  }
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  while (r.peek("dir ")) {
    ManifestDir d;
    std::size_t at = 0;
    std::size_t len = 0;
    if (!r.lit("dir ") || !r.stamp(d.stamp) || !r.lit(" ") || !r.str(d.path) || !r.lit(" ") || !r.num(at) ||
        !r.lit(" ") || !r.num(len) || !r.lit("\n") || d.path.empty() ||
        at != (ranges.empty() ? 0 : ranges.back().first + ranges.back().second)) {
      return std::nullopt;  // the ranges tile the names block in order
    }
    ranges.emplace_back(at, len);
    m.dirs.push_back(std::move(d));
  }
  if (r.peek("nc ")) {
    if (!r.lit("nc ") || !r.str(m.not_cacheable) || !r.lit("\n") || m.not_cacheable.empty()) {
      return std::nullopt;
    }
  }
  if (r.peek("seen ")) {
    if (!r.lit("seen ") || !r.str(m.name_directory_seen) || !r.lit("\n") || m.name_directory_seen.empty()) {
      return std::nullopt;
    }
  }
  while (r.peek("fm ")) {
    std::string f;
    if (!r.lit("fm ") || !r.str(f) || !r.lit("\n") || f.empty() ||
        (!m.file_macros.empty() && !(m.file_macros.back() < f))) {
      return std::nullopt;  // sorted, unique
    }
    m.file_macros.push_back(std::move(f));
  }
  std::size_t block_size = 0;
  std::string_view block;
  if (!r.lit("names ") || !r.num(block_size) || !r.lit("\n")) {
    return std::nullopt;
  }
  block_at = r.pos();
  if (!r.raw(block_size, block) || r.pos() != identity_end || !r.lit(k_details) ||
      block_size != (ranges.empty() ? 0 : ranges.back().first + ranges.back().second)) {
    return std::nullopt;
  }
  if (part == ManifestPart::lookup) {
    m.has_details = false;
    m.name_ranges = std::move(ranges);
    return m;
  }
  for (std::size_t i = 0; i < m.dirs.size(); ++i) {
    auto names = parse_names(block.substr(ranges[i].first, ranges[i].second));
    if (!names) {
      return std::nullopt;
    }
    m.dirs[i].names = std::move(*names);
  }
  for (auto& h : m.headers) {
    std::string path;
    if (!r.lit("fact ") || !r.str(path) || !r.lit("\n") || path != h.path) {
      return std::nullopt;
    }
    h.directives.names_main_file = r.lit("loc\n");
    while (r.peek("inc ")) {
      IncludeDirective d;
      r.lit("inc ");
      if (r.lit("a ")) {
        d.angled = true;
      } else if (r.lit("c ")) {
        d.computed = true;
      } else if (!r.lit("q ")) {
        return std::nullopt;
      }
      if (!r.str(d.name) || !r.lit("\n") || d.name.empty()) {
        return std::nullopt;
      }
      h.directives.includes.push_back(std::move(d));
    }
    while (r.peek("def ")) {
      MacroDefinition d;
      r.lit("def ");
      if (r.lit("f ")) {
        d.function_like = true;
      } else if (!r.lit("o ")) {
        return std::nullopt;
      }
      if (!r.str(d.name) || !r.lit(" ") || !r.str(d.params) || !r.lit(" ") || !r.str(d.body) || !r.lit("\n") ||
          d.name.empty()) {
        return std::nullopt;
      }
      h.directives.defines.push_back(std::move(d));
    }
  }
  if (!r.lit("end\n") || !r.at_end()) {
    return std::nullopt;
  }
  return m;
}

// Reads exactly `n` bytes at the current offset of `fd` into `out`.
bool read_exactly(int fd, char* out, std::size_t n) {
  while (n > 0) {
    const ssize_t got = util::io::read(fd, out, n);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return false;
    }
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// `n` bytes, not initialised: a lookup reads over all of them (a std::string
// would zero-fill the ~370 KB of CuPy's identity part first).
std::shared_ptr<char[]> uninitialised(std::size_t n) {
  return std::shared_ptr<char[]>(new char[n]);  // default-initialised: no fill
}

}  // namespace

std::optional<HeaderManifest> parse_manifest(std::string_view text, std::string_view input, ManifestPart part) {
  std::size_t block_at = 0;
  auto m = parse_text(text, input, part, block_at);
  if (m && part == ManifestPart::lookup) {
    const std::size_t size = m->name_ranges.empty() ? 0 : m->name_ranges.back().first + m->name_ranges.back().second;
    std::shared_ptr<char[]> copy = uninitialised(size);
    std::memcpy(copy.get(), text.data() + block_at, size);
    m->names_block = std::string_view(copy.get(), size);
    m->names_text = std::move(copy);
  }
  return m;
}

std::optional<HeaderManifest> load_manifest(const fs::path& dir, const std::string& input, ManifestPart part) {
  if (dir.empty()) {
    return std::nullopt;
  }
  const fs::path p = dir / input.substr(0, 2) / input;
  util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<std::uint64_t>(st.st_size) > k_max_manifest_bytes) {
    return std::nullopt;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (part == ManifestPart::with_details) {
    std::string text;
    if (util::io::read_bounded(fd.get(), k_max_manifest_bytes, text, size) != 0 || text.size() > k_max_manifest_bytes) {
      return std::nullopt;
    }
    std::size_t block_at = 0;
    return parse_text(text, input, part, block_at);
  }
  // A lookup reads the first line, then exactly the identity and "details\n"
  // (in one read where the first 64 KiB hold them).
  const std::size_t first = std::min<std::size_t>(size, 64u << 10);
  std::shared_ptr<char[]> buf = uninitialised(first);
  if (!read_exactly(fd.get(), buf.get(), first)) {
    return std::nullopt;
  }
  MemoReader head(std::string_view(buf.get(), first));
  const auto identity = identity_length(head);
  if (!identity) {
    return std::nullopt;
  }
  const std::size_t want = head.pos() + *identity + k_details.size();
  if (want >= size) {
    return std::nullopt;  // no room left for the facts' "end\n"
  }
  if (want > first) {
    std::shared_ptr<char[]> all = uninitialised(want);
    std::memcpy(all.get(), buf.get(), first);
    if (!read_exactly(fd.get(), all.get() + first, want - first)) {
      return std::nullopt;
    }
    buf = std::move(all);
  }
  const std::string_view text(buf.get(), want);
  std::size_t block_at = 0;
  auto m = parse_text(text, input, part, block_at);
  if (m) {
    // The block stays where it was read: the ranges move by its offset.
    for (auto& [at, len] : m->name_ranges) {
      at += block_at;
    }
    m->names_block = text;
    m->names_text = std::move(buf);
  }
  return m;
}

void store_manifest(const fs::path& dir, const HeaderManifest& m) {
  if (dir.empty() || m.input.size() != 64) {
    return;
  }
  const std::string text = serialize_manifest(m);
  if (text.size() > k_max_manifest_bytes) {
    return;
  }
  const fs::path shard = dir / m.input.substr(0, 2);
  std::error_code ec;
  fs::create_directories(shard, ec);
  if (util::write_file_atomically(shard / m.input, text, 0600, util::FileSync::none)) {
    trim_shard(shard);
  }
}

}  // namespace kcache::jit
