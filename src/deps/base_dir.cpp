#include "deps/base_dir.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>

#include "deps/source_text.hpp"
#include "deps/working_directory.hpp"
#include "util/atomic_write.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t k_max_header_bytes = std::size_t{64} << 20;
constexpr std::size_t k_max_verdict_bytes = 4096;
constexpr std::size_t k_max_memo_verdicts = 65536;

std::mutex g_mutex;
std::map<std::string, std::string>& verdicts() {
  static auto* m = new std::map<std::string, std::string>();  // NOLINT: process lifetime
  return *m;
}

bool ident_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '_' || u == '$' ||
         u >= 0x80;
}

// base_dir's verdicts are "base-dir-2-": those of kcache before splices,
// pastes and toolkit macros counted are not read.
std::string verdict_prefix(VerdictKind kind) { return kind == VerdictKind::base_dir ? "base-dir-2-" : "line-names-"; }

fs::path verdict_file(const std::string& key_hex, const fs::path& memo_dir, VerdictKind kind) {
  // Beside the header manifests of the same shard, trimmed with them.
  return memo_dir.empty() || key_hex.size() != 64 ? fs::path()
                                                  : memo_dir / key_hex.substr(0, 2) / (verdict_prefix(kind) + key_hex);
}

bool valid_verdict(std::string_view v, VerdictKind kind) {
  if (v.empty() || v.find('\n') != std::string_view::npos) {
    return false;
  }
  return kind == VerdictKind::line_names || v == "relative" || v.rfind("absolute: ", 0) == 0;
}

constexpr std::array<std::string_view, 6> k_location_names{"__FILE__",       "__BASE_FILE__",
                                                           "__builtin_FILE", "__builtin_source_location",
                                                           "source_location", "assert"};

// Calls `fn(identifier)` for each identifier-like run of `text` (strings and
// comments included: a false alarm only keeps a key absolute); stops when it returns true.
template <class Fn>
bool any_identifier(std::string_view text, Fn fn) {
  for (std::size_t i = 0; i < text.size();) {
    if (!ident_char(text[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && ident_char(text[j])) {
      ++j;
    }
    if (!(text[i] >= '0' && text[i] <= '9') && fn(text.substr(i, j - i))) {
      return true;
    }
    i = j;
  }
  return false;
}

// What one file's text shows of the ways to form a location name.
struct LocationScan {
  std::string_view token;     // a location name, whole
  std::string fragment;       // an identifier that may be a piece of one
  std::string toolkit_macro;  // an identifier the toolkit defines to reach one
  bool pastes = false;        // holds `##` (or `%:%:`)
};

LocationScan scan_location(std::string_view raw, const std::set<std::string, std::less<>>* toolkit_macros) {
  LocationScan out;
  out.token = location_token(raw);
  if (!out.token.empty()) {
    return out;
  }
  const std::string joined = joined_text(raw);
  const std::string_view text = joined;
  out.pastes = text.find("##") != std::string_view::npos || text.find("%:%:") != std::string_view::npos;
  any_identifier(text, [&](std::string_view id) {
    if (out.fragment.empty() && location_fragment(id)) {
      out.fragment = std::string(id);
    }
    if (out.toolkit_macro.empty() && toolkit_macros != nullptr && toolkit_macros->find(id) != toolkit_macros->end()) {
      out.toolkit_macro = std::string(id);
    }
    return !out.toolkit_macro.empty();
  });
  return out;
}

}  // namespace

std::string base_dir_setting() {
  const char* v = std::getenv("KCACHE_BASE_DIR");
  if (v == nullptr || *v != '/') {
    return {};
  }
  std::string s = fs::path(v).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') {
    s.pop_back();
  }
  return s == "/" ? std::string() : s;
}

std::string relative_to_base(const std::string& path, const std::string& base) {
  if (base.empty() || path.size() < base.size() || path.compare(0, base.size(), base) != 0) {
    return path;
  }
  if (path.size() == base.size()) {
    return ".";
  }
  if (path[base.size()] != '/') {
    return path;  // /home/ab is not under /home/a
  }
  std::string rest = path.substr(base.size() + 1);
  return rest.empty() ? "." : rest;
}

std::string base_dir_anchor(const std::string& base) {
  if (base.empty()) {
    return {};
  }
  const std::string cwd = current_directory();
  return !cwd.empty() && relative_to_base(cwd, base) != cwd ? cwd : std::string();
}

std::string keyed_path(const std::string& path, const std::string& base, const std::string& anchor) {
  const std::string rel = relative_to_base(path, base);
  if (anchor.empty() || rel == path) {
    return rel;
  }
  // Both under base: the lexical way from the working directory (`..` only
  // climbs directories under base, which both paths share).
  std::string p = fs::path(path).lexically_normal().lexically_relative(anchor).string();
  return p.empty() ? rel : p;
}

std::string paths_reach_output_because(const CompileRequest& request, const CanonicalOptions& options) {
  if (request.target_kind == "ltoir") {
    return "NVRTC writes the program name and working directory into every LTO-IR";
  }
  for (const auto& o : options.options) {
    if (o == "--device-debug" || o == "--generate-line-info" || o == "--dlink-time-opt") {
      return o + " writes the paths of the files it reads into the output";
    }
  }
  return {};
}

namespace {

std::string_view whole_location_name(std::string_view text) {
  for (const auto t : k_location_names) {
    for (auto at = text.find(t); at != std::string_view::npos; at = text.find(t, at + 1)) {
      const bool starts = at == 0 || !ident_char(text[at - 1]);
      const bool ends = at + t.size() == text.size() || !ident_char(text[at + t.size()]);
      if (starts && ends) {
        return t;
      }
    }
  }
  return {};
}

}  // namespace

std::string_view location_token(std::string_view text) {
  if (const auto t = whole_location_name(text); !t.empty()) {
    return t;
  }
  // Only a file with a splice or a trigraph is copied to be joined.
  if (text.find('\\') == std::string_view::npos && !has_trigraph(text)) {
    return {};
  }
  return whole_location_name(joined_text(text));
}

bool location_fragment(std::string_view id) {
  if (id.size() < 2) {
    return false;
  }
  return std::any_of(k_location_names.begin(), k_location_names.end(), [&](std::string_view name) {
    return id.size() < name.size() && name.find(id) != std::string_view::npos;
  });
}

std::string files_name_their_location(const CompileRequest& request, const std::vector<HeaderDependency>& headers,
                                      const std::string& base,
                                      const std::set<std::string, std::less<>>* toolkit_macros) {
  std::string pastes;    // a file that holds ##
  std::string fragment;  // a file and the piece of a name it holds
  auto check = [&](std::string_view text, const std::string& what) -> std::string {
    const LocationScan l = scan_location(text, toolkit_macros);
    if (!l.token.empty()) {
      return what + " uses " + std::string(l.token);
    }
    if (!l.toolkit_macro.empty()) {
      return what + " uses " + l.toolkit_macro + ", which the toolkit defines to name the file";
    }
    if (pastes.empty() && l.pastes) {
      pastes = what;
    }
    if (fragment.empty() && !l.fragment.empty()) {
      fragment = what + " holds " + l.fragment;
    }
    if (!pastes.empty() && !fragment.empty()) {
      return pastes + " pastes tokens (##) and " + fragment + ", which may be pasted into a name of the file";
    }
    return {};
  };
  if (auto why = check(request.source, relative_to_base(request.name, base)); !why.empty()) {
    return why;
  }
  for (const auto& h : request.headers) {
    if (auto why = check(h.bytes, "in-memory header " + relative_to_base(h.name, base)); !why.empty()) {
      return why;
    }
  }
  for (const auto& h : headers) {
    const auto bytes = util::io::read_small_file(h.path, k_max_header_bytes, 0);
    if (!bytes || util::sha256_hex(*bytes) != h.sha256) {
      return relative_to_base(h.path, base) + " changed while kcache read it";
    }
    if (auto why = check(*bytes, relative_to_base(h.path, base)); !why.empty()) {
      return why;
    }
  }
  return {};
}

std::optional<std::string> remembered_verdict(const std::string& key_hex, const fs::path& memo_dir, VerdictKind kind) {
  const std::string slot = verdict_prefix(kind) + key_hex;
  {
    std::lock_guard lock(g_mutex);
    if (const auto it = verdicts().find(slot); it != verdicts().end()) {
      return it->second;
    }
  }
  const auto file = verdict_file(key_hex, memo_dir, kind);
  if (file.empty()) {
    return std::nullopt;
  }
  auto text = util::io::read_small_file(file.string(), k_max_verdict_bytes, O_NOFOLLOW);
  if (!text || text->empty() || text->back() != '\n') {
    return std::nullopt;
  }
  text->pop_back();
  if (!valid_verdict(*text, kind)) {
    return std::nullopt;
  }
  std::lock_guard lock(g_mutex);
  if (verdicts().size() >= k_max_memo_verdicts) {
    verdicts().clear();
  }
  verdicts()[slot] = *text;
  return text;
}

void remember_verdict(const std::string& key_hex, const fs::path& memo_dir, const std::string& verdict,
                      VerdictKind kind) {
  {
    std::lock_guard lock(g_mutex);
    if (verdicts().size() >= k_max_memo_verdicts) {
      verdicts().clear();
    }
    verdicts()[verdict_prefix(kind) + key_hex] = verdict;
  }
  const auto file = verdict_file(key_hex, memo_dir, kind);
  if (!file.empty() && verdict.size() < k_max_verdict_bytes) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    (void)util::write_file_atomically(file, verdict + "\n", 0600, util::FileSync::none);
  }
}

bool output_names_base(std::string_view payload, const std::string& base) {
  if (base.empty()) {
    return false;
  }
  const std::string needle = base + "/";
  if (payload.find(needle) != std::string_view::npos) {
    return true;
  }
  std::string decimal;
  for (const char c : needle) {
    decimal += (decimal.empty() ? "" : ", ") + std::to_string(static_cast<unsigned char>(c));
  }
  return payload.find(decimal) != std::string_view::npos;
}

}  // namespace kcache::jit
