#include "nvcc/nvcc_manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "nvcc/record_text.hpp"
#include "util/atomic_write.hpp"
#include "util/clock.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_manifest_magic = "kcache-nvcc-deps 1\n";
constexpr std::string_view k_memo_magic = "kcache-nvcc-memo 2\n";
constexpr std::size_t k_shard_max_files = 256;

void write_stamp(RecordWriter& w, const FileStamp& s) {
  w.num(s.dev).num(s.ino).num(s.size).num(static_cast<std::uint64_t>(s.mtime_ns)).num(static_cast<std::uint64_t>(s.ctime_ns));
}

std::optional<FileStamp> read_stamp(RecordReader& r) {
  const auto dev = r.num();
  const auto ino = r.num();
  const auto size = r.num();
  const auto mtime = r.num();
  const auto ctime = r.num();
  if (!dev || !ino || !size || !mtime || !ctime || *mtime > INT64_MAX || *ctime > INT64_MAX) {
    return std::nullopt;
  }
  return FileStamp{*dev, *ino, *size, static_cast<std::int64_t>(*mtime), static_cast<std::int64_t>(*ctime)};
}

bool is_key_hex(std::string_view s) { return s.size() == 64 && util::is_lower_hex(s); }

}  // namespace

std::string DependencyManifest::serialize() const {
  RecordWriter w;
  w.raw(k_manifest_magic);
  for (const auto& h : headers) {
    w.tag("h").str(h).end();
  }
  for (std::size_t i = 0; i < absent.size();) {
    std::size_t j = i;
    while (j < absent.size() && absent[j].dir == absent[i].dir) {
      ++j;
    }
    w.tag("a").str(absent[i].dir).num(j - i).end();
    for (std::size_t k = i; k < j; ++k) {
      w.tag("n").str(absent[k].name).end();
    }
    i = j;
  }
  if (has_depfile) {
    w.tag("d").str(depfile).end();
  }
  w.tag("end").end();
  return w.take();
}

std::optional<DependencyManifest> DependencyManifest::parse(std::string_view text) {
  if (text.size() > k_manifest_max_bytes || text.substr(0, k_manifest_magic.size()) != k_manifest_magic) {
    return std::nullopt;
  }
  RecordReader r(text.substr(k_manifest_magic.size()));
  DependencyManifest m;
  while (r.tag_is("h")) {
    const auto h = r.str();
    if (!h || h->empty() || !r.end()) {
      return std::nullopt;
    }
    m.headers.emplace_back(*h);
  }
  while (r.tag_is("a")) {
    const auto dir = r.str();
    const auto count = r.num();
    if (!dir || dir->empty() || !count || *count == 0 || *count > text.size() || !r.end()) {
      return std::nullopt;
    }
    for (std::uint64_t i = 0; i < *count; ++i) {
      if (!r.tag_is("n")) {
        return std::nullopt;
      }
      const auto name = r.str();
      if (!name || name->empty() || name->find('/') != std::string_view::npos || !r.end()) {
        return std::nullopt;
      }
      AbsentName a{std::string(*dir), std::string(*name)};
      if (!m.absent.empty() && !(m.absent.back() < a)) {
        return std::nullopt;  // sorted and unique
      }
      m.absent.push_back(std::move(a));
    }
  }
  if (r.tag_is("d")) {
    const auto d = r.str();
    if (!d || !r.end()) {
      return std::nullopt;
    }
    m.has_depfile = true;
    m.depfile = std::string(*d);
  }
  if (!r.tag_is("end") || !r.end() || !r.at_end()) {
    return std::nullopt;
  }
  return m;
}

LocalMemo LocalMemo::make(std::string input_key, std::string manifest_key, std::string object_key,
                          const HeaderState& state, const DependencyManifest& manifest,
                          const PathRewrite& rewrite) {
  const std::int64_t now = util::realtime_ns();
  LocalMemo m;
  m.input_key = std::move(input_key);
  m.manifest_key = std::move(manifest_key);
  m.object_key = std::move(object_key);
  m.base_dir = rewrite.base();
  m.present = state.present;
  m.headers = state.headers;
  for (auto& h : m.headers) {
    if (h.stamp.is_racy(now)) {
      h.stamp = FileStamp{};
    }
  }
  std::string last;
  for (const auto& a : manifest.absent) {
    if (a.dir == last) {
      continue;
    }
    last = a.dir;
    const std::string dir = rewrite.expand(a.dir);
    const auto s = stamp_of(dir);
    m.dirs.emplace_back(dir, s && !s->is_racy(now) ? *s : FileStamp{});
  }
  m.has_depfile = manifest.has_depfile;
  m.depfile = rewrite.expand(manifest.depfile);
  return m;
}

std::string LocalMemo::serialize() const {
  RecordWriter w;
  w.raw(k_memo_magic);
  w.tag("k").str(input_key).str(manifest_key).str(object_key).str(base_dir).num(present).end();
  for (const auto& h : headers) {
    w.tag("f").str(h.path);
    write_stamp(w, h.stamp);
    w.str(h.sha256).end();
  }
  for (const auto& [dir, stamp] : dirs) {
    w.tag("g").str(dir);
    write_stamp(w, stamp);
    w.end();
  }
  if (has_depfile) {
    w.tag("d").str(depfile).end();
  }
  std::string text = w.take();
  const std::string sum = util::sha256_hex(text);
  RecordWriter tail;
  tail.tag("sum").str(sum).end();
  return text + tail.text();
}

std::optional<LocalMemo> LocalMemo::parse(std::string_view text) {
  if (text.size() > k_manifest_max_bytes || text.substr(0, k_memo_magic.size()) != k_memo_magic) {
    return std::nullopt;
  }
  RecordReader r(text.substr(k_memo_magic.size()));
  LocalMemo m;
  if (!r.tag_is("k")) {
    return std::nullopt;
  }
  const auto k1 = r.str();
  const auto k2 = r.str();
  const auto k3 = r.str();
  const auto base = k3 ? r.str() : std::nullopt;
  const auto present = base ? r.num() : std::nullopt;
  if (!present || !is_key_hex(*k1) || !is_key_hex(*k2) || !is_key_hex(*k3) || !r.end()) {
    return std::nullopt;
  }
  m.present = *present;
  m.base_dir = std::string(*base);
  m.input_key = std::string(*k1);
  m.manifest_key = std::string(*k2);
  m.object_key = std::string(*k3);
  while (r.tag_is("f")) {
    const auto path = r.str();
    const auto stamp = path ? read_stamp(r) : std::nullopt;
    const auto sha = stamp ? r.str() : std::nullopt;
    if (!sha || path->empty() || !(*sha == "missing" || is_key_hex(*sha)) || !r.end()) {
      return std::nullopt;
    }
    m.headers.push_back(HeaderFile{std::string(*path), std::string(*path), std::string(*sha), *stamp});
  }
  while (r.tag_is("g")) {
    const auto dir = r.str();
    const auto stamp = dir ? read_stamp(r) : std::nullopt;
    if (!stamp || dir->empty() || !r.end()) {
      return std::nullopt;
    }
    m.dirs.emplace_back(std::string(*dir), *stamp);
  }
  if (r.tag_is("d")) {
    const auto d = r.str();
    if (!d || !r.end()) {
      return std::nullopt;
    }
    m.has_depfile = true;
    m.depfile = std::string(*d);
  }
  const std::size_t body = k_memo_magic.size() + r.position();
  if (!r.tag_is("sum")) {
    return std::nullopt;
  }
  const auto sum = r.str();
  if (!sum || !r.end() || !r.at_end() || *sum != util::sha256_hex(text.substr(0, body))) {
    return std::nullopt;
  }
  return m;
}

std::optional<LocalMemo> LocalMemo::load(const fs::path& dir, const std::string& input_key_hex) {
  if (dir.empty() || !is_key_hex(input_key_hex)) {
    return std::nullopt;
  }
  const fs::path file = dir / input_key_hex.substr(0, 2) / input_key_hex;
  auto text = util::io::read_small_file(file.string(), k_manifest_max_bytes, O_NOFOLLOW);
  if (!text) {
    return std::nullopt;
  }
  auto memo = parse(*text);
  if (!memo || memo->input_key != input_key_hex) {
    return std::nullopt;
  }
  return memo;
}

void LocalMemo::save(const fs::path& dir) const {
  if (dir.empty() || !is_key_hex(input_key)) {
    return;
  }
  const fs::path shard = dir / input_key.substr(0, 2);
  std::error_code ec;
  fs::create_directories(shard, ec);
  if (ec) {
    return;
  }
  ::chmod(dir.c_str(), 0700);
  if (!util::write_file_atomically(shard / input_key, serialize(), 0600, util::FileSync::none)) {
    return;
  }
  // Keep the shard small: the oldest memos go first (a lost memo costs one slow lookup).
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  for (const auto& e : fs::directory_iterator(shard, ec)) {
    if (e.is_regular_file(ec)) {
      files.emplace_back(e.last_write_time(ec), e.path());
    }
  }
  if (files.size() > k_shard_max_files) {
    std::sort(files.begin(), files.end());
    for (std::size_t i = 0; i + k_shard_max_files < files.size(); ++i) {
      fs::remove(files[i].second, ec);
    }
  }
}

bool LocalMemo::still_applies() const {
  const auto changed = changed_dirs();
  return changed && changed->empty();
}

std::optional<std::vector<std::string>> LocalMemo::changed_dirs() const {
  for (const auto& h : headers) {
    const auto now = stamp_of(h.path);
    if (h.sha256 == "missing") {
      if (now) {
        return std::nullopt;
      }
      continue;
    }
    if (!now || !(*now == h.stamp) || h.stamp.ctime_ns == 0) {
      return std::nullopt;
    }
  }
  std::vector<std::string> changed;
  for (const auto& [dir, stamp] : dirs) {
    const auto now = stamp_of(dir);
    if (!now) {
      return std::nullopt;
    }
    if (stamp.ctime_ns == 0 || !(*now == stamp)) {
      changed.push_back(dir);  // changed, or not trusted when the memo was made
    }
  }
  return changed;
}

}  // namespace kcache::nvcc
