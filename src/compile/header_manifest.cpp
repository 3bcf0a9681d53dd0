#include "compile/header_manifest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <optional>

#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "compile/memo_reader.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-header-manifest 2\n";

void put_str(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

void put_stamp(std::string& out, const FileStamp& s) {
  out += std::to_string(s.dev) + ' ' + std::to_string(s.ino) + ' ' + std::to_string(s.size) + ' ' +
         std::to_string(s.mtime_ns) + ' ' + std::to_string(s.ctime_ns);
}

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

// Whether directory `d` (the `i`th of `m`) still decides its names as recorded.
bool dir_still_applies(const HeaderManifest& m, std::size_t i) {
  const ManifestDir& d = m.dirs[i];
  struct stat st {};
  if (::stat(d.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return false;
  }
  if (stamp_of(st) == d.stamp) {
    return true;
  }
  // A lookup parse left the names unparsed: only a changed directory's are read.
  std::optional<std::vector<std::pair<std::string, char>>> lazy;
  if (!m.has_details && i < m.name_ranges.size()) {
    const auto [at, len] = m.name_ranges[i];
    lazy = parse_names(std::string_view(m.names_block).substr(at, len));
    if (!lazy) {
      return false;
    }
  }
  const auto& names = lazy ? *lazy : d.names;
  if (names.empty()) {
    return false;
  }
  util::Fd dfd(::open(d.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
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

bool manifest_still_applies(const HeaderManifest& m) {
  for (std::size_t i = 0; i < m.dirs.size(); ++i) {
    if (!dir_still_applies(m, i)) {
      return false;
    }
  }
  // Headers come sorted by path, so those of one directory are neighbours:
  // each directory is looked up once and its files stat'ed relative to it,
  // which spares the kernel walking every long path again.
  std::string dir;
  util::Fd dir_fd;
  for (const auto& h : m.headers) {
    const auto slash = h.path.rfind('/');
    struct stat st {};
    int rc = 0;
    if (slash == std::string::npos || slash == 0) {
      rc = ::stat(h.path.c_str(), &st);
    } else {
      if (dir.size() != slash || h.path.compare(0, slash, dir) != 0) {
        dir.assign(h.path, 0, slash);
        dir_fd.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!dir_fd) {
          return false;
        }
      }
      rc = ::fstatat(dir_fd.get(), h.path.c_str() + slash + 1, &st, 0);
    }
    if (rc != 0 || !S_ISREG(st.st_mode) || !(stamp_of(st) == h.stamp)) {
      return false;
    }
  }
  return true;
}

std::string serialize_manifest(const HeaderManifest& m) {
  std::string out(k_magic);
  out += "input " + m.input + "\n";
  out += "list " + (m.list.size() == 64 ? m.list : header_list_digest(m.headers)) + "\n";
  for (const auto& h : m.headers) {
    out += "header ";
    put_stamp(out, h.stamp);
    out += ' ' + h.sha256 + ' ';
    put_str(out, h.path);
    out += '\n';
  }
  // The name records of every directory, one block: a lookup copies it
  // unparsed, and reads a directory's part only when its identity changed.
  std::string block;
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
    out += ' ' + std::to_string(at) + ' ' + std::to_string(block.size() - at) + '\n';
  }
  if (!m.not_cacheable.empty()) {
    out += "nc ";
    put_str(out, m.not_cacheable);
    out += '\n';
  }
  out += "names " + std::to_string(block.size()) + '\n';
  out += block;
  out += "details\n";
  for (const auto& h : m.headers) {
    out += "fact ";
    put_str(out, h.path);
    out += '\n';
    for (const auto& i : h.directives.includes) {
      out += i.computed ? "inc c " : (i.angled ? "inc a " : "inc q ");
      put_str(out, i.name);
      out += '\n';
    }
    for (const auto& d : h.directives.defines) {
      out += d.function_like ? "def f " : "def o ";
      put_str(out, d.name);
      out += ' ';
      put_str(out, d.params);
      out += ' ';
      put_str(out, d.body);
      out += '\n';
    }
  }
  out += "end\n";
  return out;
}

std::optional<HeaderManifest> parse_manifest(std::string_view text, std::string_view input, ManifestPart part) {
  if (text.size() > k_max_manifest_bytes) {
    return std::nullopt;
  }
  MemoReader r(text);
  HeaderManifest m;
  if (!r.lit(k_magic) || !r.lit("input ") || !r.hex64(m.input) || !r.lit("\n") || m.input != input ||
      !r.lit("list ") || !r.hex64(m.list) || !r.lit("\n")) {
    return std::nullopt;
  }
  while (r.peek("header ")) {
    ManifestHeader h;
    if (!r.lit("header ") || !r.stamp(h.stamp) || !r.lit(" ") || !r.hex64(h.sha256) || !r.lit(" ") ||
        !r.str(h.path) || !r.lit("\n") || h.path.empty()) {
      return std::nullopt;
    }
    m.headers.push_back(std::move(h));
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
  std::size_t block_size = 0;
  std::string_view block;
  if (!r.lit("names ") || !r.num(block_size) || !r.lit("\n") || !r.raw(block_size, block) || !r.lit("details\n") ||
      block_size != (ranges.empty() ? 0 : ranges.back().first + ranges.back().second)) {
    return std::nullopt;
  }
  if (part == ManifestPart::lookup) {
    if (!text.ends_with("\nend\n")) {
      return std::nullopt;
    }
    m.has_details = false;
    m.names_block.assign(block);
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
  std::string text;
  if (util::io::read_bounded(fd.get(), k_max_manifest_bytes, text, static_cast<std::size_t>(st.st_size)) != 0 ||
      text.size() > k_max_manifest_bytes) {
    return std::nullopt;
  }
  return parse_manifest(text, input, part);
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
