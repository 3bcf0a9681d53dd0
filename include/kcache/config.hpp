// kcache/config.hpp: the effective settings and where each came from.
//
// One table (src/cache/config.cpp, docs/configuration.md) maps each setting to
// its config-file key, environment variable, default, description and the
// values it accepts. Precedence: command line > environment > config file >
// default. The config file is TOML with one top-level `key = value` per
// setting; it is read from --config, else $KCACHE_CONFIG, else
// $XDG_CONFIG_HOME/kcache/kcache.toml, else ~/.config/kcache/kcache.toml. A
// missing default file is fine; a missing file named by --config or
// $KCACHE_CONFIG is an error.
//
// Loading is strict: an unknown key in the file or on the command line, a
// value of the wrong type, or a value that does not parse is an
// invalid_argument error that names the file and line (or the environment
// variable, or the command line), the setting, and the values it accepts.
//
// Thread-safety: a Config is a value. load() reads the process environment
// (unless ConfigInputs::getenv is given) and the file system; it is safe to
// call from several threads as long as nothing modifies the environment.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "kcache/remote_lease.hpp"
#include "kcache/file_store.hpp"
#include "kcache/store.hpp"

namespace kcache {

enum class SettingSource { default_value, config_file, environment, command_line };

// When a put reaches the disk (the `put` setting).
enum class PutMode {
  background,  // queued and published by a background thread (WriteBehindStore); default
  sync,        // published before put() returns
};
// Returns "default", "config file", "environment" or "command line".
std::string_view to_string(SettingSource source) noexcept;

// Where Config::load reads settings from. Every member is optional.
struct ConfigInputs {
  // Command-line settings, config-file key -> value as text ("max_size" -> "10G").
  std::map<std::string, std::string> command_line;
  // A config file named on the command line (--config); empty: $KCACHE_CONFIG,
  // then the XDG default path.
  std::filesystem::path config_file;
  // Looks up an environment variable; std::nullopt when unset. Empty: the
  // process environment (std::getenv). Tests pass a map here.
  std::function<std::optional<std::string>(const std::string&)> getenv;
  // Where bad settings outside the command line go. Null (the default): the
  // first one fails the load. Not null: a bad value or unknown key in the
  // config file or the environment, a config file that cannot be read or
  // parsed (or that $KCACHE_CONFIG names but does not exist), and a missing
  // home directory are appended here, one invalid_argument or io Error each
  // (its message names the source, the setting, the value and how to fix it),
  // and skipped: the setting keeps the value of the layer below. A bad
  // command-line setting or a missing --config file still fails the load.
  // `kcache compile` and `link` use this to compile without the cache rather
  // than fail (docs/configuration.md, "Bad settings").
  std::vector<Error>* problems = nullptr;
};

struct Config {
  std::filesystem::path cache_dir;                 // cache_dir / KCACHE_DIR
  std::uint64_t max_size_bytes = std::uint64_t{5} << 30;    // max_size / KCACHE_MAX_SIZE
  std::uint64_t memory_size_bytes = std::uint64_t{256} << 20;  // memory_size / KCACHE_MEMORY_SIZE
  FsyncPolicy fsync = FsyncPolicy::none;           // fsync / KCACHE_FSYNC (docs/on-disk-format.md, "Durability")
  Sharing sharing = Sharing::private_to_user;      // sharing / KCACHE_SHARING
  ReadVerify verify = ReadVerify::fast_when_unchanged;  // verify / KCACHE_VERIFY
  PutMode put = PutMode::background;               // put / KCACHE_PUT
  bool disable = false;                            // disable / KCACHE_DISABLE
  std::string cuda_home;                           // cuda_home / KCACHE_CUDA_HOME
  std::string base_dir;                            // base_dir / KCACHE_BASE_DIR (docs/keys.md, "Sharing across checkouts")
  unsigned jobs = 0;                               // jobs / KCACHE_JOBS (0 = number of cores)
  std::string log_level = "warning";               // log_level / KCACHE_LOG_LEVEL
  // The team tier (docs/remote-format.md, docs/security.md).
  std::vector<std::string> remote;                 // remote / KCACHE_REMOTE (URLs, in order)
  std::filesystem::path remote_key_file;           // remote_key_file / KCACHE_REMOTE_KEY_FILE
  std::vector<std::filesystem::path> remote_read_key_files;  // remote_read_key_files / KCACHE_REMOTE_READ_KEY_FILES
  bool remote_compression = true;                  // remote_compression / KCACHE_REMOTE_COMPRESSION (zstd|none)
  std::uint64_t remote_queue_size = std::uint64_t{64} << 20;  // remote_queue_size / KCACHE_REMOTE_QUEUE_SIZE
  std::uint32_t remote_breaker_failures = 3;       // remote_breaker_failures / KCACHE_REMOTE_BREAKER_FAILURES
  std::uint32_t remote_breaker_seconds = 30;       // remote_breaker_seconds / KCACHE_REMOTE_BREAKER_SECONDS
  std::uint32_t remote_flush_timeout_ms = 10000;   // remote_flush_timeout_ms / KCACHE_REMOTE_FLUSH_TIMEOUT_MS (0 = no bound)
  std::uint32_t remote_budget_ms = 5000;           // remote_budget_ms / KCACHE_REMOTE_BUDGET_MS (0 = no bound)
  std::uint32_t remote_lease_ttl_ms = 10000;       // remote_lease_ttl_ms / KCACHE_REMOTE_LEASE_TTL_MS (0: no leases)
  std::uint32_t remote_lease_wait_ms = 300000;     // remote_lease_wait_ms / KCACHE_REMOTE_LEASE_WAIT_MS
  std::filesystem::path remote_ca_file;            // remote_ca_file / KCACHE_REMOTE_CA_FILE (empty: the system's CAs)
  // The read-only bundle tier (docs/bundles.md).
  std::vector<std::filesystem::path> bundles;      // bundles / KCACHE_BUNDLES (bundle files, in order)
  std::vector<std::filesystem::path> bundle_trusted_keys;  // bundle_trusted_keys / KCACHE_BUNDLE_TRUSTED_KEYS
  EvictionPolicy eviction_policy = EvictionPolicy::cost;  // eviction_policy / KCACHE_EVICTION_POLICY
  bool run_summary = true;                         // run_summary / KCACHE_RUN_SUMMARY (docs/run.md, "The summary")

  // Not a setting: how the file tier reads large payloads (FileStoreOptions::
  // large_reads). The Python package sets LargeReads::copied.
  LargeReads large_reads = LargeReads::mapped;
  // Not a setting either: FileStoreOptions::map_min_bytes (the kcache command sets 16 KiB).
  std::size_t map_min_bytes = 1024 * 1024;

  // For each setting name (the config-file key), where its value came from.
  std::map<std::string, SettingSource> origin;
  std::filesystem::path config_file;  // the file that was read, empty if none

  // Loads defaults, then the config file, then the environment, then
  // `overrides` (config-file key -> value, from the command line). Returns
  // invalid_argument naming the setting, the source and the accepted values
  // when a value does not parse or a key is unknown; io when a config file
  // exists but cannot be read (unless ConfigInputs::problems collects them).
  static Result<Config> load(const std::map<std::string, std::string>& overrides = {});
  // The same, with every input spelled out (see ConfigInputs).
  static Result<Config> load_from(const ConfigInputs& inputs);

  // One row per setting, in table order, for `kcache config`.
  struct Row {
    std::string key;          // config-file key, also the --set name
    std::string env;          // environment variable
    std::string value;        // effective value as text (parses back to the same value)
    SettingSource source;     // where `value` came from
    std::string description;  // one line
    std::string accepted;     // the values it accepts, in words
    std::string default_value;
  };
  std::vector<Row> rows() const;

  // The FileStore options these settings describe.
  FileStoreOptions file_store_options() const;
};

// The names of every setting (config-file keys), in table order.
std::vector<std::string> setting_keys();

// The default cache directory: $XDG_CACHE_HOME/kcache when XDG_CACHE_HOME is
// an absolute path, else $HOME/.cache/kcache, else the home directory of the
// user in the password database (never /tmp). Returns invalid_argument when no
// home directory can be found. `getenv` as in ConfigInputs.
Result<std::filesystem::path> default_cache_dir(
    const std::function<std::optional<std::string>(const std::string&)>& getenv = {});

// Parses "10G", "512M", "64k", "1048576", "1.5G" (binary units K M G T,
// case-insensitive, optional "iB" or "B" suffix, optional space before the
// unit). Returns invalid_argument for anything else, including overflow.
Result<std::uint64_t> parse_size(std::string_view text);
// Formats bytes for people: "0 B", "512 B", "1.5 KiB", "10.0 GiB".
std::string format_size(std::uint64_t bytes);

// Opens the stores the settings describe: a MemoryStore of
// `memory_size_bytes` (none when 0) in front of the FileStore at `cache_dir`,
// as a TieredStore; with `put` = background (the default) the chain is wrapped
// in a WriteBehindStore, so puts are published by a background thread and the
// store must be destroyed (or flushed) before the process exits for its last
// puts to be kept. With `disable`, returns a store that never hits and never
// keeps anything. Fails as FileStore::open fails (a root owned by another
// user, a root that cannot be created), except with `bundles`: then the
// bundle tier sits in front of the disk, and a cache directory that holds no
// layout yet is created only by the first put (a bundle hit writes nothing),
// one that cannot be opened leaves the bundles to serve alone (one warning).
// The caller owns the store.
Result<std::unique_ptr<Store>> open_configured_store(const Config& config);

// Where the toolkit and header memos of `config` go (Toolkit::set_memo_dir):
// `cache_dir`/v1/toolkit, or nowhere (empty) when nothing may be written
// under the cache directory: `disable`, no cache directory, or a read-only
// bundle image (`bundles` set and no cache layout there yet: a hit served
// from a bundle writes nothing, docs/bundles.md).
std::filesystem::path memo_dir_for(const Config& config);

// The read-only bundle tier alone, as open_configured_store places it in its
// chain: the files of `bundles`, trusted by the keys of
// `bundle_trusted_keys`, read with `verify`. Null when `bundles` names no
// file. Never fails: a bundle or key file that cannot be used is warned about
// once (stderr) and skipped. The caller owns the store.
std::unique_ptr<Store> open_configured_bundle_tier(const Config& config);

// The cross-host lease the settings describe (one compile per key across
// hosts; docs/single-flight.md): on the first writable Redis or Redis Cluster
// remote, with `remote_lease_ttl_ms` and `remote_lease_wait_ms`. Give it to
// the Cache (CacheOptions::remote_lease) over the store of
// open_configured_store(config). Null when there is none: no such remote
// (HTTP remotes have no lease), a ttl of 0, `disable`, or a team key file
// that cannot be read. No network traffic until the first miss.
std::shared_ptr<RemoteLease> open_configured_lease(const Config& config);

}  // namespace kcache
