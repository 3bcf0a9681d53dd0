#include "cache/remote_tiers.hpp"

#include "cache/store_warnings.hpp"
#include "store/remote/redis_lease.hpp"
#include "store/remote/team_key.hpp"

namespace kcache {

namespace {

// The breaker, budget and counters every remote store of `config` shares:
// one state file per server under v1/stats/, one budget per process and
// cache directory.
void share_state(const Config& config, remote::RemoteStoreOptions& options) {
  options.breaker_failures = config.remote_breaker_failures;
  options.breaker_seconds = config.remote_breaker_seconds;
  options.budget = remote::RemoteBudget::for_process(config.cache_dir.string(),
                                                     std::chrono::milliseconds(config.remote_budget_ms));
  if (!config.cache_dir.empty() && std::filesystem::is_directory(config.cache_dir / "v1" / "stats")) {
    options.stats_dir = config.cache_dir / "v1" / "stats";
    options.stats_group_shared = config.sharing == Sharing::group;
  }
}

}  // namespace

Result<remote::RemoteSpec> configured_remote_spec(const Config& config, const std::string& url) {
  auto spec = remote::parse_remote_url(url);
  if (spec && spec->ca_file.empty() && (spec->tls || spec->scheme == remote::Scheme::https ||
                                             (spec->scheme == remote::Scheme::s3 &&
                                              spec->endpoint.rfind("https://", 0) == 0))) {
    spec->ca_file = config.remote_ca_file.string();
  }
  return spec;
}

Result<remote::CodecOptions> remote_codec_options(const Config& config) {
  remote::CodecOptions codec;
  codec.compression = config.remote_compression ? remote::Compression::zstd : remote::Compression::none;
  if (!config.remote_key_file.empty()) {
    auto key = remote::load_team_key(config.remote_key_file);
    if (!key) {
      return tl::unexpected(key.error());
    }
    codec.sign = std::move(*key);
  }
  for (const auto& path : config.remote_read_key_files) {
    auto key = remote::load_team_key(path);
    if (!key) {
      return tl::unexpected(key.error());
    }
    codec.read.push_back(std::move(*key));
  }
  return codec;
}

std::vector<std::unique_ptr<remote::RemoteStore>> open_remote_stores(
    const Config& config, const std::function<void(const std::string&)>& warn, FileStore* local) {
  std::vector<std::unique_ptr<remote::RemoteStore>> out;
  if (config.remote.empty()) {
    return out;
  }
  auto codec_options = remote_codec_options(config);
  if (!codec_options) {
    warn("remote tiers are off: " + codec_options.error().message);
    return out;
  }
  const remote::CodecOptions& codec = *codec_options;
  for (const std::string& url : config.remote) {
    auto spec = configured_remote_spec(config, url);
    if (!spec) {
      warn(spec.error().message + "; this remote is left out");
      continue;
    }
    remote::RemoteStoreOptions options;
    options.spec = std::move(*spec);
    options.codec = codec;
    options.local = local;
    share_state(config, options);
    auto store = remote::RemoteStore::open(std::move(options));
    if (!store) {
      warn(store.error().message + "; this remote is left out");
      continue;
    }
    out.push_back(std::move(*store));
  }
  return out;
}

std::shared_ptr<RemoteLease> open_configured_lease(const Config& config) {
  if (config.disable || config.remote_lease_ttl_ms == 0) {
    return nullptr;
  }
  // Where the data tiers are off for a bad key file, leases are off too:
  // a lease promises an entry that would never be published.
  if (!config.remote_key_file.empty() && !remote::load_team_key(config.remote_key_file)) {
    return nullptr;
  }
  for (const std::string& url : config.remote) {
    auto spec = configured_remote_spec(config, url);
    if (!spec || spec->read_only ||
        (spec->scheme != remote::Scheme::redis && spec->scheme != remote::Scheme::redis_unix &&
         spec->scheme != remote::Scheme::redis_cluster && spec->scheme != remote::Scheme::s3)) {
      continue;
    }
    remote::RemoteStoreOptions options;
    options.spec = std::move(*spec);
    share_state(config, options);
    // The data tier of this remote says its failures, once; the lease store
    // says only that the process's budget is spent, when it spends the last of it.
    options.warn_failures = false;
    options.warn = [](const std::string& line) { store_warnings::warn(store_warnings::Source::tier, line); };
    auto store = remote::RemoteStore::open(std::move(options));
    if (!store || !(*store)->supports_leases()) {
      continue;
    }
    remote::RedisLeaseOptions lease;
    lease.ttl_ms = config.remote_lease_ttl_ms;
    lease.wait_ms = config.remote_lease_wait_ms;
    // The lease's counters go to its store's breaker file (share_state above).
    return std::make_shared<remote::RedisLease>(std::move(*store), std::move(lease));
  }
  return nullptr;
}

}  // namespace kcache
