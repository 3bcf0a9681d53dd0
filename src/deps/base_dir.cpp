#include "deps/base_dir.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>

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

fs::path verdict_file(const std::string& key_hex, const fs::path& memo_dir) {
  // Beside the header manifests of the same shard, trimmed with them.
  return memo_dir.empty() || key_hex.size() != 64 ? fs::path() : memo_dir / key_hex.substr(0, 2) / ("base-dir-" + key_hex);
}

bool valid_verdict(std::string_view v) {
  return v == "relative" || (v.rfind("absolute: ", 0) == 0 && v.find('\n') == std::string_view::npos);
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

std::string_view location_token(std::string_view text) {
  static constexpr std::array<std::string_view, 5> k_tokens{"__FILE__", "__BASE_FILE__", "__builtin_FILE",
                                                            "source_location", "assert"};
  for (const auto t : k_tokens) {
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

std::string files_name_their_location(const CompileRequest& request, const std::vector<HeaderDependency>& headers,
                                      const std::string& base) {
  if (const auto t = location_token(request.source); !t.empty()) {
    return relative_to_base(request.name, base) + " uses " + std::string(t);
  }
  for (const auto& h : request.headers) {
    if (const auto t = location_token(h.bytes); !t.empty()) {
      return "in-memory header " + relative_to_base(h.name, base) + " uses " + std::string(t);
    }
  }
  for (const auto& h : headers) {
    const auto bytes = util::io::read_small_file(h.path, k_max_header_bytes, 0);
    if (!bytes || util::sha256_hex(*bytes) != h.sha256) {
      return relative_to_base(h.path, base) + " changed while kcache read it";
    }
    if (const auto t = location_token(*bytes); !t.empty()) {
      return relative_to_base(h.path, base) + " uses " + std::string(t);
    }
  }
  return {};
}

std::optional<std::string> remembered_verdict(const std::string& key_hex, const fs::path& memo_dir) {
  {
    std::lock_guard lock(g_mutex);
    if (const auto it = verdicts().find(key_hex); it != verdicts().end()) {
      return it->second;
    }
  }
  const auto file = verdict_file(key_hex, memo_dir);
  if (file.empty()) {
    return std::nullopt;
  }
  auto text = util::io::read_small_file(file.string(), k_max_verdict_bytes, O_NOFOLLOW);
  if (!text || text->empty() || text->back() != '\n') {
    return std::nullopt;
  }
  text->pop_back();
  if (!valid_verdict(*text)) {
    return std::nullopt;
  }
  std::lock_guard lock(g_mutex);
  if (verdicts().size() >= k_max_memo_verdicts) {
    verdicts().clear();
  }
  verdicts()[key_hex] = *text;
  return text;
}

void remember_verdict(const std::string& key_hex, const fs::path& memo_dir, const std::string& verdict) {
  {
    std::lock_guard lock(g_mutex);
    if (verdicts().size() >= k_max_memo_verdicts) {
      verdicts().clear();
    }
    verdicts()[key_hex] = verdict;
  }
  const auto file = verdict_file(key_hex, memo_dir);
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
