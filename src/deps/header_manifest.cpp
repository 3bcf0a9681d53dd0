// deps/header_manifest.cpp: a header manifest's file: its format (written,
// parsed, loaded, stored and trimmed per shard) and the stamps and header
// list digest it holds. Whether a manifest still applies on disk is
// deps/manifest_check.cpp.
#include "deps/header_manifest.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <optional>

#include "deps/memo_reader.hpp"
#include "deps/memo_writer.hpp"
#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-header-manifest 5 ";
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

}  // namespace

std::optional<std::vector<std::pair<std::string, char>>> parse_manifest_names(std::string_view block) {
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

namespace {

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

std::string serialize_manifest(const HeaderManifest& m) {
  // Every part is sized before it is written: a manifest of CuPy's tree is
  // ~1 MB, and growing it by doubling cost more than writing it (each large
  // allocation first consolidates the heap a scan left full of small blocks).
  std::size_t block_size = 0;
  std::size_t identity_size = 2 * k_record_room + m.input.size() + m.not_cacheable.size() + m.name_directory_seen.size() +
                              m.name_directory_doubt.size();
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
  if (!m.name_directory_doubt.empty()) {
    out += "doubt ";
    put_str(out, m.name_directory_doubt);
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
  if (r.peek("doubt ")) {
    if (!r.lit("doubt ") || !r.str(m.name_directory_doubt) || !r.lit("\n") || m.name_directory_doubt.empty() ||
        !m.name_directory_seen.empty()) {
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
    auto names = parse_manifest_names(block.substr(ranges[i].first, ranges[i].second));
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
  util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));  // a FIFO never blocks
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
