// kcache/config.hpp: the effective settings and where each came from.
//
// One table (src/cache/config.cpp, docs/configuration.md) maps each setting to
// its config-file key, environment variable and default. Precedence: command
// line > environment > config file ($XDG_CONFIG_HOME/kcache/kcache.toml, or
// $KCACHE_CONFIG) > default.
//
// Thread-safety: a Config is a value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kcache/error.hpp"
#include "kcache/file_store.hpp"
#include "kcache/store.hpp"

namespace kcache {

enum class SettingSource { default_value, config_file, environment, command_line };
std::string_view to_string(SettingSource source) noexcept;

struct Config {
  std::filesystem::path cache_dir;                 // cache_dir / KCACHE_DIR
  std::uint64_t max_size_bytes = std::uint64_t{5} << 30;    // max_size / KCACHE_MAX_SIZE
  std::uint64_t memory_size_bytes = std::uint64_t{256} << 20;  // memory_size / KCACHE_MEMORY_SIZE
  FsyncPolicy fsync = FsyncPolicy::file;           // fsync / KCACHE_FSYNC
  Sharing sharing = Sharing::private_to_user;      // sharing / KCACHE_SHARING
  ReadVerify verify = ReadVerify::fast_when_unchanged;  // verify / KCACHE_VERIFY
  bool disable = false;                            // disable / KCACHE_DISABLE
  std::string cuda_home;                           // cuda_home / KCACHE_CUDA_HOME
  unsigned jobs = 0;                               // jobs / KCACHE_JOBS (0 = number of cores)
  std::string log_level = "warning";               // log_level / KCACHE_LOG_LEVEL

  // For each setting name (the config-file key), where its value came from and
  // the file path when it came from a file.
  std::map<std::string, SettingSource> origin;
  std::filesystem::path config_file;  // the file that was read, empty if none

  // Loads defaults, then the config file, then the environment, then
  // `overrides` (config-file key -> value, from the command line). Returns
  // invalid_argument naming the setting, the source and the accepted values
  // when a value does not parse.
  static Result<Config> load(const std::map<std::string, std::string>& overrides = {});

  // Every setting as (key, value as text, source) for `kcache config`.
  struct Row {
    std::string key;
    std::string env;
    std::string value;
    SettingSource source;
    std::string description;
  };
  std::vector<Row> rows() const;

  // The FileStore options these settings describe.
  FileStoreOptions file_store_options() const;
};

// The default cache directory: $XDG_CACHE_HOME/kcache, else ~/.cache/kcache
// (never /tmp). Returns invalid_argument when neither HOME nor XDG_CACHE_HOME is set.
Result<std::filesystem::path> default_cache_dir();

// Parses "10G", "512M", "64k", "1048576" (binary units, case-insensitive, optional "iB"/"B").
Result<std::uint64_t> parse_size(std::string_view text);
std::string format_size(std::uint64_t bytes);

// Opens the stores the settings describe: memory in front of file, as a
// TieredStore. With `disable`, returns a store that never hits and never keeps.
Result<std::unique_ptr<Store>> open_configured_store(const Config& config);

}  // namespace kcache
