// Config: the one settings table and the loader that applies it, layer by
// layer (default < config file < environment < command line).
//
// To add a setting: add a member to Config (include/kcache/config.hpp), one
// row to k_settings below, and one row to docs/configuration.md.
#include "kcache/config.hpp"
#include "cache/config_toml.hpp"
#include "store/remote/remote_spec.hpp"
#include "util/edit_distance.hpp"
#include "util/input_file.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace kcache {

namespace {

using GetEnv = std::function<std::optional<std::string>(const std::string&)>;

constexpr std::uintmax_t k_config_file_max_bytes = 1 << 20;

// Where a value being parsed came from, for error messages and relative paths.
struct Origin {
  SettingSource source = SettingSource::default_value;
  std::string where;                 // "/home/u/.config/kcache/kcache.toml:3", "KCACHE_DIR", ...
  std::filesystem::path base_dir;    // relative paths are resolved against this
  std::string fix;                   // what the user should do about a bad value
};

using Parse = Result<void> (*)(Config&, const std::string&, const Origin&);
using Format = std::string (*)(const Config&);

struct Setting {
  std::string_view key;
  std::string_view env;
  std::string_view default_text;
  std::string_view description;
  std::string_view accepted;
  Parse parse;
  Format format;
};

tl::unexpected<Error> bad_value(const std::string& value, std::string_view reason = {}) {
  // The caller (apply) adds the setting, the source and the accepted values.
  return make_error(ErrorCode::invalid_argument, value + (reason.empty() ? "" : " (" + std::string(reason) + ")"));
}

Result<bool> parse_bool(const std::string& v) {
  std::string lower = v;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* t : {"1", "true", "yes", "on"}) {
    if (lower == t) {
      return true;
    }
  }
  for (const char* f : {"0", "false", "no", "off"}) {
    if (lower == f) {
      return false;
    }
  }
  return bad_value(v);
}

std::string exact_size(std::uint64_t bytes) {
  static constexpr std::array<std::pair<char, int>, 4> k_units{{{'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}}};
  for (const auto& [unit, shift] : k_units) {
    const std::uint64_t m = std::uint64_t{1} << shift;
    if (bytes != 0 && bytes % m == 0) {
      return std::to_string(bytes / m) + unit;
    }
  }
  return std::to_string(bytes);
}

Result<void> parse_cache_dir(Config& c, const std::string& v, const Origin& o) {
  if (v.empty()) {
    return bad_value("\"\"", "empty");
  }
  std::filesystem::path p(v);
  if (v == "~" || v.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') {
      return bad_value(v, "HOME is not set, so ~ cannot be expanded");
    }
    p = std::filesystem::path(home) / v.substr(std::min<std::size_t>(2, v.size()));
  }
  if (p.is_relative()) {
    p = o.base_dir / p;
  }
  c.cache_dir = p.lexically_normal();
  return {};
}

Result<void> parse_max_size(Config& c, const std::string& v, const Origin&) {
  auto size = parse_size(v);
  if (!size) {
    return bad_value(v);
  }
  c.max_size_bytes = *size;
  return {};
}

Result<void> parse_memory_size(Config& c, const std::string& v, const Origin&) {
  auto size = parse_size(v);
  if (!size) {
    return bad_value(v);
  }
  c.memory_size_bytes = *size;
  return {};
}

Result<void> parse_fsync(Config& c, const std::string& v, const Origin&) {
  if (v == "none") {
    c.fsync = FsyncPolicy::none;
  } else if (v == "file") {
    c.fsync = FsyncPolicy::file;
  } else if (v == "file+directory" || v == "file_and_directory") {
    c.fsync = FsyncPolicy::file_and_directory;
  } else {
    return bad_value(v);
  }
  return {};
}

std::string format_fsync(const Config& c) {
  switch (c.fsync) {
    case FsyncPolicy::none: return "none";
    case FsyncPolicy::file: return "file";
    case FsyncPolicy::file_and_directory: return "file+directory";
  }
  return "file";
}

Result<void> parse_sharing(Config& c, const std::string& v, const Origin&) {
  if (v == "private") {
    c.sharing = Sharing::private_to_user;
  } else if (v == "group") {
    c.sharing = Sharing::group;
  } else {
    return bad_value(v);
  }
  return {};
}

Result<void> parse_verify(Config& c, const std::string& v, const Origin&) {
  if (v == "fast") {
    c.verify = ReadVerify::fast_when_unchanged;
  } else if (v == "full") {
    c.verify = ReadVerify::always_full;
  } else {
    return bad_value(v);
  }
  return {};
}

Result<void> parse_put(Config& c, const std::string& v, const Origin&) {
  if (v == "background") {
    c.put = PutMode::background;
  } else if (v == "sync") {
    c.put = PutMode::sync;
  } else {
    return bad_value(v);
  }
  return {};
}

Result<void> parse_disable(Config& c, const std::string& v, const Origin&) {
  auto b = parse_bool(v);
  if (!b) {
    return tl::unexpected(b.error());
  }
  c.disable = *b;
  return {};
}

Result<void> parse_cuda_home(Config& c, const std::string& v, const Origin& o) {
  std::filesystem::path p(v);
  if (!v.empty() && p.is_relative()) {
    p = o.base_dir / p;
  }
  c.cuda_home = v.empty() ? std::string() : p.lexically_normal().string();
  return {};
}

// An absolute directory (a relative one in the config file is relative to the
// file); `/` would key every path relative and is refused.
Result<void> parse_base_dir(Config& c, const std::string& v, const Origin& o) {
  std::filesystem::path p(v);
  if (!v.empty() && p.is_relative()) {
    if (o.base_dir.empty()) {
      return bad_value(v);
    }
    p = o.base_dir / p;
  }
  std::string s = v.empty() ? std::string() : p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') {
    s.pop_back();
  }
  if (s == "/") {
    return bad_value(v);
  }
  c.base_dir = s;
  return {};
}

Result<void> parse_jobs(Config& c, const std::string& v, const Origin&) {
  unsigned n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || n > 4096) {
    return bad_value(v);
  }
  c.jobs = n;
  return {};
}

Result<void> parse_log_level(Config& c, const std::string& v, const Origin&) {
  for (const char* level : {"error", "warning", "info", "debug"}) {
    if (v == level) {
      c.log_level = v;
      return {};
    }
  }
  return bad_value(v);
}

// Splits a space-separated list (KCACHE_REMOTE, the joined TOML array).
std::vector<std::string> split_words(const std::string& v) {
  std::vector<std::string> out;
  std::istringstream in(v);
  for (std::string w; in >> w;) {
    out.push_back(w);
  }
  return out;
}

Result<void> parse_remote(Config& c, const std::string& v, const Origin&) {
  std::vector<std::string> urls = split_words(v);
  for (const std::string& url : urls) {
    if (auto spec = remote::parse_remote_url(url); !spec) {
      return bad_value(spec.error().message);
    }
  }
  c.remote = std::move(urls);
  return {};
}

std::string format_remote(const Config& c) {
  // Masked: `kcache config` never prints a password (TESTING S04).
  std::string out;
  for (const std::string& url : c.remote) {
    auto spec = remote::parse_remote_url(url);
    out += (out.empty() ? "" : " ") + (spec ? spec->masked() : std::string("(invalid)"));
  }
  return out;
}

std::filesystem::path resolve_path(const std::string& v, const Origin& o) {
  std::filesystem::path p(v);
  if (v == "~" || v.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
      p = std::filesystem::path(home) / v.substr(std::min<std::size_t>(2, v.size()));
    }
  }
  if (!v.empty() && p.is_relative()) {
    p = o.base_dir / p;
  }
  return v.empty() ? std::filesystem::path() : p.lexically_normal();
}

Result<void> parse_remote_key_file(Config& c, const std::string& v, const Origin& o) {
  c.remote_key_file = resolve_path(v, o);
  return {};
}

Result<void> parse_remote_read_key_files(Config& c, const std::string& v, const Origin& o) {
  c.remote_read_key_files.clear();
  for (const std::string& w : split_words(v)) {
    c.remote_read_key_files.push_back(resolve_path(w, o));
  }
  return {};
}

// A space-separated list of paths (bundles, bundle_trusted_keys).
Result<void> parse_path_list(std::vector<std::filesystem::path>& out, const std::string& v, const Origin& o) {
  out.clear();
  for (const std::string& w : split_words(v)) {
    out.push_back(resolve_path(w, o));
  }
  return {};
}

std::string format_path_list(const std::vector<std::filesystem::path>& paths) {
  std::string out;
  for (const auto& p : paths) {
    out += (out.empty() ? "" : " ") + p.string();
  }
  return out;
}

Result<void> parse_remote_compression(Config& c, const std::string& v, const Origin&) {
  if (v != "zstd" && v != "none") {
    return bad_value(v);
  }
  c.remote_compression = v == "zstd";
  return {};
}

Result<void> parse_remote_queue_size(Config& c, const std::string& v, const Origin&) {
  auto size = parse_size(v);
  if (!size || *size == 0) {
    return bad_value(v);
  }
  c.remote_queue_size = *size;
  return {};
}

Result<void> parse_small_count(std::uint32_t& out, const std::string& v, std::uint32_t max) {
  std::uint32_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || n > max) {
    return bad_value(v);
  }
  out = n;
  return {};
}

// THE table. Order here is the order of `kcache config` and of the docs.
const std::array<Setting, 28> k_settings{{
    {"cache_dir", "KCACHE_DIR", "$XDG_CACHE_HOME/kcache, else ~/.cache/kcache",
     "Directory of the on-disk cache (never defaults to /tmp)",
     "a directory path; ~ is expanded, a relative path in the config file is relative to the file",
     parse_cache_dir, [](const Config& c) { return c.cache_dir.string(); }},
    {"max_size", "KCACHE_MAX_SIZE", "5G", "Size cap of the on-disk cache; least recently used entries are evicted",
     "a size such as 512M, 10G, 1.5T or a number of bytes; 0 means no cap", parse_max_size,
     [](const Config& c) { return exact_size(c.max_size_bytes); }},
    {"memory_size", "KCACHE_MEMORY_SIZE", "256M", "Size cap of the in-process memory tier in front of the disk",
     "a size such as 64M or 1G; 0 turns the memory tier off", parse_memory_size,
     [](const Config& c) { return exact_size(c.memory_size_bytes); }},
    {"fsync", "KCACHE_FSYNC", "none", "How hard a put pushes bytes to disk before publishing",
     "none, file, or file+directory", parse_fsync, format_fsync},
    {"sharing", "KCACHE_SHARING", "private", "Who may use the cache directory",
     "private (dirs 0700, files 0600) or group (dirs 2770, files 0660)", parse_sharing,
     [](const Config& c) { return std::string(c.sharing == Sharing::group ? "group" : "private"); }},
    {"verify", "KCACHE_VERIFY", "fast", "How a read checks the payload against its passport",
     "fast (full SHA-256 once, then a cheap check while the file is unchanged) or full (SHA-256 on every read)",
     parse_verify,
     [](const Config& c) { return std::string(c.verify == ReadVerify::always_full ? "full" : "fast"); }},
    {"put", "KCACHE_PUT", "background", "When a put reaches the disk: queued and published by a background thread, or before the call returns",
     "background (write-behind: the caller does not wait for the disk) or sync", parse_put,
     [](const Config& c) { return std::string(c.put == PutMode::sync ? "sync" : "background"); }},
    {"disable", "KCACHE_DISABLE", "false", "Turn the cache off: nothing is read or kept, everything is compiled",
     "true or false (also 1/0, yes/no, on/off)", parse_disable,
     [](const Config& c) { return std::string(c.disable ? "true" : "false"); }},
    {"cuda_home", "KCACHE_CUDA_HOME", "(search CUDA_HOME, CUDA_PATH, /usr/local/cuda)",
     "Where to look for the CUDA toolkit libraries", "a directory path, or empty to search", parse_cuda_home,
     [](const Config& c) { return c.cuda_home; }},
    {"base_dir", "KCACHE_BASE_DIR", "(none)",
     "Checkout root: NVRTC paths under it are keyed relative to it where the output does not name them",
     "an absolute directory other than /, or empty for none", parse_base_dir,
     [](const Config& c) { return c.base_dir; }},
    {"jobs", "KCACHE_JOBS", "0", "Parallel compiles and builds; 0 means one per CPU core",
     "a whole number from 0 to 4096", parse_jobs, [](const Config& c) { return std::to_string(c.jobs); }},
    {"log_level", "KCACHE_LOG_LEVEL", "warning", "How much kcache reports on stderr",
     "error, warning, info or debug", parse_log_level, [](const Config& c) { return c.log_level; }},
    {"remote", "KCACHE_REMOTE", "(none)",
     "Remote tiers shared by a team, fastest first (passwords are shown as ***)",
     "space-separated URLs redis[s]://[user[:password]@]host[:port][/db], redis+unix:///path, "
     "redis[s]+cluster://host:port,... or http(s)://host[:port]/prefix, each with optional "
     "?read_only=true&connect_timeout_ms=N&timeout_ms=N&max_entry_size=SIZE&ttl_s=N (http: "
     "bearer_token_file/_env, basic_auth_file/_env; https, rediss: ca_file); in the config file a "
     "list of URLs or tables {url = ..., read_only = true, ...}",
     parse_remote, format_remote},
    {"remote_key_file", "KCACHE_REMOTE_KEY_FILE", "(none: entries are not signed)",
     "Team key that signs uploads; with it, only entries signed by a team key are accepted",
     "a file of 32 or more bytes, mode 0600 (`kcache remote keygen FILE` writes one)", parse_remote_key_file,
     [](const Config& c) { return c.remote_key_file.string(); }},
    {"remote_ca_file", "KCACHE_REMOTE_CA_FILE", "(none: the system's CA certificates)",
     "CA certificates that verify TLS remotes (https://, rediss://) whose URL names no ca_file",
     "a PEM file of CA certificates",
     [](Config& c, const std::string& v, const Origin& o) -> Result<void> {
       c.remote_ca_file = v.empty() ? std::filesystem::path() : resolve_path(v, o);
       return {};
     },
     [](const Config& c) { return c.remote_ca_file.string(); }},
    {"remote_read_key_files", "KCACHE_REMOTE_READ_KEY_FILES", "(none)",
     "More team keys accepted when reading (during a key rotation)", "space-separated key files",
     parse_remote_read_key_files,
     [](const Config& c) {
       std::string out;
       for (const auto& p : c.remote_read_key_files) {
         out += (out.empty() ? "" : " ") + p.string();
       }
       return out;
     }},
    {"remote_compression", "KCACHE_REMOTE_COMPRESSION", "zstd", "How objects are compressed on the remote",
     "zstd or none", parse_remote_compression,
     [](const Config& c) { return std::string(c.remote_compression ? "zstd" : "none"); }},
    {"remote_queue_size", "KCACHE_REMOTE_QUEUE_SIZE", "64M",
     "Bytes of uploads a process queues for the remotes before a put waits for room", "a size such as 16M",
     parse_remote_queue_size, [](const Config& c) { return exact_size(c.remote_queue_size); }},
    {"remote_breaker_failures", "KCACHE_REMOTE_BREAKER_FAILURES", "3",
     "Failures in a row after which a remote is skipped for a while (circuit breaker); 0 never skips",
     "a whole number from 0 to 1000",
     [](Config& c, const std::string& v, const Origin&) { return parse_small_count(c.remote_breaker_failures, v, 1000); },
     [](const Config& c) { return std::to_string(c.remote_breaker_failures); }},
    {"remote_breaker_seconds", "KCACHE_REMOTE_BREAKER_SECONDS", "30", "How long a remote is skipped once the breaker opens",
     "a whole number of seconds from 0 to 86400",
     [](Config& c, const std::string& v, const Origin&) { return parse_small_count(c.remote_breaker_seconds, v, 86400); },
     [](const Config& c) { return std::to_string(c.remote_breaker_seconds); }},
    {"remote_flush_timeout_ms", "KCACHE_REMOTE_FLUSH_TIMEOUT_MS", "10000",
     "How long a process that exits waits for its queued uploads; what is still queued then is dropped "
     "(0 waits for every upload)",
     "a whole number of milliseconds from 0 to 3600000",
     [](Config& c, const std::string& v, const Origin&) {
       return parse_small_count(c.remote_flush_timeout_ms, v, 3'600'000);
     },
     [](const Config& c) { return std::to_string(c.remote_flush_timeout_ms); }},
    {"remote_budget_ms", "KCACHE_REMOTE_BUDGET_MS", "5000",
     "The most time one process loses to remote operations that fail or are slow (lookups, uploads, the exit "
     "flush, leases, every remote together); then it skips the remotes (0: no bound)",
     "a whole number of milliseconds from 0 to 86400000",
     [](Config& c, const std::string& v, const Origin&) { return parse_small_count(c.remote_budget_ms, v, 86'400'000); },
     [](const Config& c) { return std::to_string(c.remote_budget_ms); }},
    {"remote_lease_ttl_ms", "KCACHE_REMOTE_LEASE_TTL_MS", "10000",
     "Cross-host lease on a Redis remote (one compile per key across hosts): how long a lease lives unless its "
     "owner renews it; a dead owner's lease is taken over after this. 0 turns leases off",
     "a whole number of milliseconds from 0 to 3600000",
     [](Config& c, const std::string& v, const Origin&) { return parse_small_count(c.remote_lease_ttl_ms, v, 3600000); },
     [](const Config& c) { return std::to_string(c.remote_lease_ttl_ms); }},
    {"remote_lease_wait_ms", "KCACHE_REMOTE_LEASE_WAIT_MS", "300000",
     "The longest a process waits for another host compiling the same key before compiling it itself",
     "a whole number of milliseconds from 0 to 86400000",
     [](Config& c, const std::string& v, const Origin&) { return parse_small_count(c.remote_lease_wait_ms, v, 86400000); },
     [](const Config& c) { return std::to_string(c.remote_lease_wait_ms); }},
    {"bundles", "KCACHE_BUNDLES", "(none)",
     "Signed bundle files served read-only, in place, as a tier in front of the disk (docs/bundles.md)",
     "space-separated bundle files (in the config file also a list); each must be signed by a trusted key",
     [](Config& c, const std::string& v, const Origin& o) { return parse_path_list(c.bundles, v, o); },
     [](const Config& c) { return format_path_list(c.bundles); }},
    {"bundle_trusted_keys", "KCACHE_BUNDLE_TRUSTED_KEYS", "(none: no bundle is trusted)",
     "Public keys whose bundles are trusted (`bundle verify`, `bundle install`, the bundle tier)",
     "space-separated public key files (`kcache bundle keygen` writes one; in the config file also a list)",
     [](Config& c, const std::string& v, const Origin& o) { return parse_path_list(c.bundle_trusted_keys, v, o); },
     [](const Config& c) { return format_path_list(c.bundle_trusted_keys); }},
    {"eviction_policy", "KCACHE_EVICTION_POLICY", "cost",
     "Which entries the size cap evicts first (pinned entries never)",
     "cost (cheapest to rebuild per byte, weighed by uses and time since last use), lru (least recently "
     "used) or gds (cost without the uses)",
     [](Config& c, const std::string& v, const Origin&) -> Result<void> {
       if (v == "cost") {
         c.eviction_policy = EvictionPolicy::cost;
       } else if (v == "lru") {
         c.eviction_policy = EvictionPolicy::lru;
       } else if (v == "gds") {
         c.eviction_policy = EvictionPolicy::gds;
       } else {
         return bad_value(v);
       }
       return {};
     },
     [](const Config& c) { return std::string(eviction_policy_name(c.eviction_policy)); }},
    {"run_summary", "KCACHE_RUN_SUMMARY", "true",
     "Whether `kcache run` prints one line on stderr when the program exits: the JIT compiles it saw, served and "
     "compiled",
     "true or false (also 1/0, yes/no, on/off)",
     [](Config& c, const std::string& v, const Origin&) -> Result<void> {
       auto b = parse_bool(v);
       if (!b) {
         return tl::unexpected(b.error());
       }
       c.run_summary = *b;
       return {};
     },
     [](const Config& c) { return std::string(c.run_summary ? "true" : "false"); }},
}};

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : k_settings) {
    if (s.key == key) {
      return &s;
    }
  }
  return nullptr;
}

std::string known_keys_hint(std::string_view unknown) {
  std::string out;
  for (const Setting& s : k_settings) {
    if (util::edit_distance(unknown, s.key) <= 2) {
      return fmt::format("did you mean '{}'?", s.key);
    }
  }
  out = "known settings:";
  for (const Setting& s : k_settings) {
    out += ' ';
    out += s.key;
  }
  return out;
}

tl::unexpected<Error> unknown_key(std::string_view key, const Origin& o) {
  return make_error(ErrorCode::invalid_argument,
                    fmt::format("{}: unknown setting '{}'; {}", o.where, key, known_keys_hint(key)));
}

// Remote URLs as an error message may show them: any password replaced by ***.
std::string mask_passwords(const std::string& text) {
  std::string out;
  for (const std::string& w : split_words(text)) {
    std::string m = w;
    const auto scheme = m.find("://");
    const auto at = m.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
      const auto colon = m.find(':', scheme + 3);
      if (colon != std::string::npos && colon < at) {
        m = m.substr(0, colon) + ":***" + m.substr(at);
      }
    }
    out += (out.empty() ? "" : " ") + m;
  }
  return out;
}

Result<void> apply(Config& c, const Setting& s, const std::string& value, const Origin& o) {
  if (auto ok = s.parse(c, value, o); !ok) {
    const std::string shown = s.key == "remote" ? mask_passwords(value) : value;
    const std::string why = s.key == "remote" ? " (" + ok.error().message + ")" : "";
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{}: invalid value \"{}\" for setting '{}'{}; accepted: {}{}", o.where,
                                  shown, s.key, why, s.accepted, o.fix.empty() ? "" : " (" + o.fix + ")"));
  }
  c.origin[std::string(s.key)] = o.source;
  return {};
}

std::optional<std::string> process_getenv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) {
    return std::nullopt;
  }
  return std::string(v);
}

// Reads the config file into `c`. A file that cannot be read or parsed fails
// as a whole; a bad key or value fails the load, or, with `problems`, is
// recorded there and skipped so that the other keys still apply.
Result<void> apply_file(Config& c, const std::filesystem::path& path, std::vector<Error>* problems) {
  // Never blocks on a FIFO and reads only a regular file (util/input_file.hpp).
  auto contents = util::read_input_file(path, "config file", k_config_file_max_bytes);
  if (!contents) {
    const bool too_large = contents.error().code == ErrorCode::invalid_argument;
    return make_error(too_large ? ErrorCode::invalid_argument : ErrorCode::io,
                      too_large ? fmt::format("config file {} is larger than 1 MiB; is it the right file? Fix or remove it",
                                              path.string())
                                : contents.error().message + "; fix its permissions or remove it");
  }
  std::error_code ec;
  toml::table table;
  try {
    table = toml::parse(*contents, path.string());
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{}:{}:{}: not valid TOML: {}; fix the file (one `key = value` per line)",
                                  path.string(), e.source().begin.line, e.source().begin.column, e.description()));
  }
  const std::filesystem::path base = std::filesystem::absolute(path, ec).parent_path();
  auto apply_key = [&](std::string_view key, const toml::node& node) -> Result<void> {
    Origin o{SettingSource::config_file, fmt::format("{}:{}", path.string(), node.source().begin.line), base,
             "fix it in " + path.string()};
    const Setting* s = find_setting(key);
    if (s == nullptr) {
      return unknown_key(key, o);
    }
    auto text = config_toml::value_text(node);
    if (!text && key == "remote") {
      auto joined = config_toml::remote_list_text(node, o.where);
      if (!joined) {
        return tl::unexpected(joined.error());
      }
      text = std::move(*joined);
    }
    if (const auto* list = node.as_array(); !text && list != nullptr && (key == "bundles" || key == "bundle_trusted_keys")) {
      // A list of files, each a string: the same as the space-separated text.
      text = std::string();
      for (const toml::node& item : *list) {
        const auto* file = item.as_string();
        if (file == nullptr) {
          text.reset();
          break;
        }
        *text += (text->empty() ? "" : " ") + file->get();
      }
    }
    if (!text) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{}: setting '{}' must be a string, an integer or a boolean; accepted: {}",
                                    o.where, s->key, s->accepted));
    }
    return apply(c, *s, *text, o);
  };
  c.config_file = path;
  for (const auto& [key, node] : table) {
    if (auto ok = apply_key(key.str(), node); !ok) {
      if (problems == nullptr) {
        return ok;
      }
      problems->push_back(std::move(ok.error()));
    }
  }
  return {};
}

// Finds the config file to read: explicit (must exist), else the XDG default
// (may be absent: returns an empty path).
Result<std::filesystem::path> locate_config_file(const ConfigInputs& inputs, const GetEnv& env) {
  std::error_code ec;
  auto must_exist = [&](const std::filesystem::path& p, std::string_view named_by) -> Result<std::filesystem::path> {
    if (!std::filesystem::is_regular_file(p, ec)) {
      return make_error(ErrorCode::not_found,
                        fmt::format("config file {} (named by {}) does not exist or is not a regular file; "
                                    "create it or point {} elsewhere",
                                    p.string(), named_by, named_by));
    }
    return p;
  };
  if (!inputs.config_file.empty()) {
    return must_exist(inputs.config_file, "--config");
  }
  if (auto v = env("KCACHE_CONFIG"); v && !v->empty()) {
    return must_exist(*v, "KCACHE_CONFIG");
  }
  std::filesystem::path candidate;
  if (auto xdg = env("XDG_CONFIG_HOME"); xdg && !xdg->empty() && std::filesystem::path(*xdg).is_absolute()) {
    candidate = std::filesystem::path(*xdg) / "kcache" / "kcache.toml";
  } else if (auto home = env("HOME"); home && !home->empty()) {
    candidate = std::filesystem::path(*home) / ".config" / "kcache" / "kcache.toml";
  }
  if (candidate.empty() || !std::filesystem::exists(candidate, ec)) {
    return std::filesystem::path();
  }
  return candidate;
}

}  // namespace

std::string_view to_string(SettingSource source) noexcept {
  switch (source) {
    case SettingSource::default_value: return "default";
    case SettingSource::config_file: return "config file";
    case SettingSource::environment: return "environment";
    case SettingSource::command_line: return "command line";
  }
  return "unknown";
}

std::vector<std::string> setting_keys() {
  std::vector<std::string> out;
  for (const Setting& s : k_settings) {
    out.emplace_back(s.key);
  }
  return out;
}

Result<Config> Config::load(const std::map<std::string, std::string>& overrides) {
  ConfigInputs inputs;
  inputs.command_line = overrides;
  return load_from(inputs);
}

Result<Config> Config::load_from(const ConfigInputs& inputs) {
  const GetEnv env = inputs.getenv ? inputs.getenv : GetEnv(process_getenv);
  Config c;
  for (const Setting& s : k_settings) {
    c.origin[std::string(s.key)] = SettingSource::default_value;
  }
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);

  // A problem outside the command line: recorded and skipped when the caller
  // collects them (ConfigInputs::problems), else the load fails with it.
  auto tolerate = [&](Error e) -> bool {
    if (inputs.problems == nullptr) {
      return false;
    }
    inputs.problems->push_back(std::move(e));
    return true;
  };
  auto file = locate_config_file(inputs, env);
  if (!file) {
    // --config naming a missing file is a command-line mistake; $KCACHE_CONFIG's is a setting's.
    if (!inputs.config_file.empty() || !tolerate(file.error())) {
      return tl::unexpected(file.error());
    }
  } else if (!file->empty()) {
    if (auto ok = apply_file(c, *file, inputs.problems); !ok && !tolerate(ok.error())) {
      return tl::unexpected(ok.error());
    }
  }
  for (const Setting& s : k_settings) {
    const auto value = env(std::string(s.env));
    // An empty variable counts as unset, as in most tools.
    if (!value || value->empty()) {
      continue;
    }
    const Origin o{SettingSource::environment, "environment variable " + std::string(s.env), cwd,
                   "fix or unset " + std::string(s.env)};
    if (auto ok = apply(c, s, *value, o); !ok && !tolerate(ok.error())) {
      return tl::unexpected(ok.error());
    }
  }
  for (const auto& [key, value] : inputs.command_line) {
    const Origin o{SettingSource::command_line, "command line", cwd, "fix the command line"};
    const Setting* s = find_setting(key);
    if (s == nullptr) {
      return unknown_key(key, o);
    }
    if (auto ok = apply(c, *s, value, o); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  if (c.origin["cache_dir"] == SettingSource::default_value) {
    auto dir = default_cache_dir(env);
    if (dir) {
      c.cache_dir = *dir;
    } else if (!tolerate(dir.error())) {
      return tl::unexpected(dir.error());
    }
  }
  return c;
}

std::vector<Config::Row> Config::rows() const {
  std::vector<Row> out;
  for (const Setting& s : k_settings) {
    const auto it = origin.find(std::string(s.key));
    out.push_back(Row{std::string(s.key), std::string(s.env), s.format(*this),
                      it == origin.end() ? SettingSource::default_value : it->second,
                      std::string(s.description), std::string(s.accepted), std::string(s.default_text)});
  }
  return out;
}

FileStoreOptions Config::file_store_options() const {
  FileStoreOptions o;
  o.root = cache_dir;
  o.max_size_bytes = max_size_bytes;
  o.fsync = fsync;
  o.sharing = sharing;
  o.verify = verify;
  o.large_reads = large_reads;
  o.map_min_bytes = map_min_bytes;
  o.eviction_policy = eviction_policy;
  return o;
}

Result<std::filesystem::path> default_cache_dir(const GetEnv& getenv) {
  const GetEnv env = getenv ? getenv : GetEnv(process_getenv);
  // XDG: a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (auto xdg = env("XDG_CACHE_HOME"); xdg && !xdg->empty() && std::filesystem::path(*xdg).is_absolute()) {
    return std::filesystem::path(*xdg) / "kcache";
  }
  if (auto home = env("HOME"); home && !home->empty()) {
    return std::filesystem::path(*home) / ".cache" / "kcache";
  }
  if (!getenv) {
    // Only the real process has a password-database entry worth asking.
    std::array<char, 4096> buf{};
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
        found->pw_dir != nullptr && found->pw_dir[0] == '/') {
      return std::filesystem::path(found->pw_dir) / ".cache" / "kcache";
    }
  }
  return make_error(ErrorCode::invalid_argument,
                    "no cache directory: neither XDG_CACHE_HOME nor HOME is set; set KCACHE_DIR to a directory "
                    "that survives reboots (kcache never defaults to /tmp)");
}

}  // namespace kcache
