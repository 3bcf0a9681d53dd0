#include "deps/toolkit_memo.hpp"

#include <fcntl.h>

#include <algorithm>
#include <charconv>
#include <string_view>

#include "deps/header_manifest.hpp"
#include "util/atomic_write.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-toolkit-memo 2\n";

bool is_lib(std::string_view s) { return s == "nvrtc" || s == "nvjitlink" || s == "nvvm"; }

bool valid_chars(std::string_view s, std::size_t max, std::string_view extra) {
  return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || extra.find(c) != std::string_view::npos;
  });
}

bool valid_id(std::string_view s) { return valid_chars(s, 80, ":"); }
bool valid_version(std::string_view s) { return valid_chars(s, 64, "./"); }
bool valid_path(std::string_view s) { return !s.empty() && s.front() == '/' && s.find('\n') == std::string_view::npos; }
bool valid_hex(std::string_view s, std::size_t n) { return s.size() == n && util::is_lower_hex(s); }

std::int64_t ns(const struct timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

std::string stamp_text(const struct stat& st) {
  return std::to_string(static_cast<std::uint64_t>(st.st_dev)) + " " + std::to_string(static_cast<std::uint64_t>(st.st_ino)) +
         " " + std::to_string(static_cast<std::int64_t>(st.st_size)) + " " + std::to_string(ns(st.st_mtim)) + " " +
         std::to_string(ns(st.st_ctim));
}

// Splits `s` at its first space: `head` before it, `s` after it. False when
// there is none.
bool take_word(std::string_view& s, std::string_view& head) {
  const auto sp = s.find(' ');
  if (sp == std::string_view::npos) {
    return false;
  }
  head = s.substr(0, sp);
  s.remove_prefix(sp + 1);
  return true;
}

bool is_decimal(std::string_view s, bool sign) {
  if (sign && !s.empty() && s.front() == '-') {
    s.remove_prefix(1);
  }
  return !s.empty() && s.size() <= 20 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool stat_is_racy(const struct stat& st, std::int64_t now_ns) {
  const std::int64_t newest = std::max(ns(st.st_mtim), ns(st.st_ctim));
  return newest > now_ns - k_racy_window_ns;
}

ToolkitMemo ToolkitMemo::load(const fs::path& file) {
  if (file.empty()) {
    return {};
  }
  const auto text = util::io::read_small_file(file.string(), k_max_bytes, O_NOFOLLOW);
  if (!text) {
    return {};
  }
  return parse(*text).value_or(ToolkitMemo{});
}

std::optional<ToolkitMemo> ToolkitMemo::parse(std::string_view t) {
  if (t.substr(0, k_magic.size()) != k_magic) {
    return std::nullopt;
  }
  t.remove_prefix(k_magic.size());
  ToolkitMemo memo;
  auto next_line = [&t](std::string_view& line) {
    const auto nl = t.find('\n');
    if (nl == std::string_view::npos) {
      return false;
    }
    line = t.substr(0, nl);
    t.remove_prefix(nl + 1);
    return true;
  };
  std::string_view line;
  while (next_line(line)) {
    if (line == "end") {
      if (!t.empty()) {
        return std::nullopt;
      }
      return memo;
    }
    std::string_view kind, rest = line;
    if (!take_word(rest, kind)) {
      return std::nullopt;
    }
    Record r;
    r.kind = std::string(kind);
    if (kind == "library") {
      std::string_view lib, f[5], id;
      if (!take_word(rest, lib) || !is_lib(lib)) {
        return std::nullopt;
      }
      for (int i = 0; i < 5; ++i) {
        if (!take_word(rest, f[i]) || !is_decimal(f[i], i >= 2)) {
          return std::nullopt;
        }
      }
      if (!take_word(rest, id) || !valid_id(id) || !valid_path(rest)) {
        return std::nullopt;
      }
      r.key = std::string(lib);
      for (const auto& x : f) {
        r.key += " " + std::string(x);
      }
      r.key += " " + std::string(rest);
      r.value = std::string(id);
    } else if (kind == "version") {
      std::string_view lib, id;
      if (!take_word(rest, lib) || !is_lib(lib) || !take_word(rest, id) || !valid_id(id) || !valid_version(rest)) {
        return std::nullopt;
      }
      r.key = std::string(lib) + " " + std::string(id);
      r.value = std::string(rest);
    } else if (kind == "listing") {
      std::string_view digest;
      std::size_t count = 0;
      if (!take_word(rest, digest) || !valid_hex(digest, 32) || !is_decimal(rest, false)) {
        return std::nullopt;
      }
      std::from_chars(rest.data(), rest.data() + rest.size(), count);
      r.key = std::string(digest);
      for (std::size_t i = 0; i < count; ++i) {
        std::string_view entry;
        if (!next_line(entry) || entry.size() < 2 || (entry[0] != 'i' && entry[0] != 'b') || entry[1] != ' ' ||
            !valid_path(entry.substr(2))) {
          return std::nullopt;
        }
        (entry[0] == 'i' ? r.listing.inputs : r.listing.builtins).emplace_back(std::string(entry.substr(2)));
      }
    } else if (kind == "fingerprint") {
      std::string_view digest;
      if (!take_word(rest, digest) || !valid_hex(digest, 32) || !valid_hex(rest, 64)) {
        return std::nullopt;
      }
      r.key = std::string(digest);
      r.value = std::string(rest);
    } else {
      return std::nullopt;
    }
    memo.m_records.push_back(std::move(r));
  }
  return std::nullopt;  // no "end": cut short
}

std::string ToolkitMemo::serialize() const {
  std::string out(k_magic);
  for (const auto& r : m_records) {
    if (r.kind == "library") {
      // key = lib + 5 numbers + path; the id goes between the numbers and the path.
      std::string_view key = r.key;
      std::size_t at = 0;
      for (int i = 0; i < 6; ++i) {
        at = key.find(' ', at) + 1;
      }
      out += "library " + std::string(key.substr(0, at)) + r.value + " " + std::string(key.substr(at)) + "\n";
    } else if (r.kind == "listing") {
      out += "listing " + r.key + " " + std::to_string(r.listing.inputs.size() + r.listing.builtins.size()) + "\n";
      for (const auto& p : r.listing.inputs) {
        out += "i " + p.string() + "\n";
      }
      for (const auto& p : r.listing.builtins) {
        out += "b " + p.string() + "\n";
      }
    } else {
      out += r.kind + " " + r.key + " " + r.value + "\n";
    }
  }
  out += "end\n";
  return out;
}

const ToolkitMemo::Record* ToolkitMemo::find(std::string_view kind, const std::string& key) const {
  const auto it = std::find_if(m_records.begin(), m_records.end(),
                               [&](const Record& r) { return r.kind == kind && r.key == key; });
  return it == m_records.end() ? nullptr : &*it;
}

void ToolkitMemo::set(Record record) {
  if (const Record* old = find(record.kind, record.key);
      old != nullptr && old->value == record.value && old->listing.inputs == record.listing.inputs &&
      old->listing.builtins == record.listing.builtins) {
    return;
  }
  std::erase_if(m_records, [&](const Record& r) { return r.kind == record.kind && r.key == record.key; });
  m_records.insert(m_records.begin(), std::move(record));
  // Keep the newest k_max_records of each kind.
  std::size_t kept_of_kind = 0;
  const std::string kind = m_records.front().kind;
  std::erase_if(m_records, [&](const Record& r) { return r.kind == kind && ++kept_of_kind > k_max_records; });
  m_changed = true;
}

std::optional<std::string> ToolkitMemo::build_id(std::string_view lib, const fs::path& path,
                                                 const struct stat& st) const {
  const Record* r = find("library", std::string(lib) + " " + stamp_text(st) + " " + path.string());
  return r != nullptr ? std::optional(r->value) : std::nullopt;
}

void ToolkitMemo::set_build_id(std::string_view lib, const fs::path& path, const struct stat& st,
                               const std::string& id, std::int64_t now_ns) {
  if (stat_is_racy(st, now_ns) || !is_lib(lib) || !valid_id(id) || !valid_path(path.string())) {
    return;
  }
  set({"library", std::string(lib) + " " + stamp_text(st) + " " + path.string(), id, {}});
}

std::optional<std::string> ToolkitMemo::version(std::string_view lib, const std::string& id) const {
  const Record* r = find("version", std::string(lib) + " " + id);
  return r != nullptr ? std::optional(r->value) : std::nullopt;
}

void ToolkitMemo::set_version(std::string_view lib, const std::string& id, const std::string& version) {
  if (is_lib(lib) && valid_id(id) && valid_version(version)) {
    set({"version", std::string(lib) + " " + id, version, {}});
  }
}

const ToolkitMemo::Listing* ToolkitMemo::listing(const std::string& dirs_digest) const {
  const Record* r = find("listing", dirs_digest);
  return r != nullptr ? &r->listing : nullptr;
}

void ToolkitMemo::set_listing(const std::string& dirs_digest, const Listing& listing) {
  for (const auto* group : {&listing.inputs, &listing.builtins}) {
    for (const auto& p : *group) {
      if (!valid_path(p.string())) {
        return;
      }
    }
  }
  if (valid_hex(dirs_digest, 32)) {
    set({"listing", dirs_digest, {}, listing});
  }
}

std::optional<std::string> ToolkitMemo::fingerprint(const std::string& inputs_digest) const {
  const Record* r = find("fingerprint", inputs_digest);
  return r != nullptr ? std::optional(r->value) : std::nullopt;
}

void ToolkitMemo::set_fingerprint(const std::string& inputs_digest, const std::string& fingerprint) {
  if (valid_hex(inputs_digest, 32) && valid_hex(fingerprint, 64)) {
    set({"fingerprint", inputs_digest, fingerprint, {}});
  }
}

void ToolkitMemo::save(const fs::path& file) {
  if (file.empty() || !m_changed) {
    return;
  }
  // Another process's records first, then ours over them (newest first).
  ToolkitMemo merged = load(file);
  for (auto it = m_records.rbegin(); it != m_records.rend(); ++it) {
    merged.set(*it);
  }
  const std::string text = merged.serialize();
  if (text.size() > k_max_bytes) {
    return;
  }
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (util::write_file_atomically(file, text, 0600, util::FileSync::none)) {
    m_changed = false;
  }
}

}  // namespace kcache::jit
