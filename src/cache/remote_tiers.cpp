#include "cache/remote_tiers.hpp"

#include "store/remote/team_key.hpp"

namespace kcache {

std::vector<std::unique_ptr<remote::RemoteStore>> open_remote_stores(
    const Config& config, const std::function<void(const std::string&)>& warn) {
  std::vector<std::unique_ptr<remote::RemoteStore>> out;
  if (config.remote.empty()) {
    return out;
  }
  remote::CodecOptions codec;
  codec.compression = config.remote_compression ? remote::Compression::zstd : remote::Compression::none;
  if (!config.remote_key_file.empty()) {
    auto key = remote::load_team_key(config.remote_key_file);
    if (!key) {
      warn("remote tiers are off: " + key.error().message);
      return out;
    }
    codec.sign = std::move(*key);
  }
  for (const auto& path : config.remote_read_key_files) {
    auto key = remote::load_team_key(path);
    if (!key) {
      warn("remote tiers are off: " + key.error().message);
      return out;
    }
    codec.read.push_back(std::move(*key));
  }
  for (const std::string& url : config.remote) {
    auto spec = remote::parse_remote_url(url);
    if (!spec) {
      warn(spec.error().message + "; this remote is left out");
      continue;
    }
    remote::RemoteStoreOptions options;
    options.spec = std::move(*spec);
    options.codec = codec;
    options.breaker_failures = config.remote_breaker_failures;
    options.breaker_seconds = config.remote_breaker_seconds;
    if (!config.cache_dir.empty() && std::filesystem::is_directory(config.cache_dir / "v1" / "stats")) {
      options.stats_dir = config.cache_dir / "v1" / "stats";
      options.stats_group_shared = config.sharing == Sharing::group;
    }
    auto store = remote::RemoteStore::open(std::move(options));
    if (!store) {
      warn(store.error().message + "; this remote is left out");
      continue;
    }
    out.push_back(std::move(*store));
  }
  return out;
}

}  // namespace kcache
