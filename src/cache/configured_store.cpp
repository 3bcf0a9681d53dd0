// open_configured_store: the stores a Config describes. Kept apart from
// config.cpp so that reading settings never pulls in the stores.
#include <utility>
#include <vector>

#include "kcache/config.hpp"
#include "kcache/file_store.hpp"
#include "kcache/memory_store.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/tiered_store.hpp"
#include "kcache/write_behind_store.hpp"
#include "bundle/bundle_store.hpp"
#include "kcache/bundle.hpp"
#include "store/disabled_store.hpp"
#include "cache/lazy_file_tier.hpp"
#include "cache/remote_tiers.hpp"
#include "cache/store_warnings.hpp"

namespace kcache {

namespace {

using store_warnings::Source;

void warn_line(const std::string& line) { store_warnings::warn(Source::tier, line); }

// Appends one tier per configured remote, slowest last: a RemoteStore, behind
// its own bounded write-behind queue unless it is read_only.
// `locations` receives each remote's masked URL (TieredStore::set_tier_location).
// Large objects are streamed into `local` (the file tier, destroyed after them).
void add_remote_tiers(const Config& config, std::vector<std::unique_ptr<Store>>& tiers,
                      std::vector<std::string>& locations, FileStore* local) {
  for (auto& store : open_remote_stores(config, warn_line, local)) {
    locations.push_back(store->spec().masked());
    if (!store->writable()) {
      tiers.push_back(std::move(store));
      continue;
    }
    WriteBehindOptions wb;
    wb.max_pending_bytes = config.remote_queue_size;
    wb.exit_flush_timeout = std::chrono::milliseconds(config.remote_flush_timeout_ms);
    wb.what = "uploads to " + std::string(store->spec().masked());
    wb.warn_on_failure = false;  // RemoteStore already warned once for this remote
    wb.warn = warn_line;         // uploads dropped at exit: said once, always
    tiers.push_back(std::make_unique<WriteBehindStore>(std::move(store), std::move(wb)));
  }
}

// Appends the read-only bundle tier when `bundles` names files. It goes in
// front of the disk, so a bundle hit fills the memory tier (sharing the
// mapping) but is never copied to the disk. Returns whether it was added.
bool add_bundle_tier(const Config& config, std::vector<std::unique_ptr<Store>>& tiers) {
  auto tier = open_configured_bundle_tier(config);
  if (!tier) {
    return false;
  }
  tiers.push_back(std::move(tier));
  return true;
}

}  // namespace

std::unique_ptr<Store> open_configured_bundle_tier(const Config& config) {
  if (config.bundles.empty()) {
    return nullptr;
  }
  BundleTrust trust;
  if (auto keys = read_bundle_public_keys(config.bundle_trusted_keys); keys) {
    trust.keys = std::move(*keys);
  } else {
    warn_line(keys.error().message + "; no bundle is trusted until it is fixed (setting bundle_trusted_keys)");
  }
  // Bundles that passed every check are remembered per user, beside the
  // toolkit memo (bundle/bundle_verdicts.hpp); none where that memo is off.
  const std::filesystem::path memo = Toolkit::instance().memo_file();
  const bundle::BundleVerdicts verdicts(memo.empty() ? std::filesystem::path() : memo.parent_path() / "bundle-verdicts");
  return bundle::BundleStore::open(config.bundles, trust, config.verify, warn_line, verdicts);
}

std::filesystem::path memo_dir_for(const Config& config) {
  if (config.disable || config.cache_dir.empty() ||
      (!config.bundles.empty() && !cache_layout_exists(config.cache_dir))) {
    return {};
  }
  return config.cache_dir / "v1" / "toolkit";
}

Result<std::unique_ptr<Store>> open_configured_store(const Config& config) {
  if (config.disable) {
    return std::unique_ptr<Store>(std::make_unique<DisabledStore>());
  }
  // One failure, one line (store_warnings.hpp): the file tier says what
  // failed and what to do; the chain and the queue around it stay quiet
  // about the same failure.
  FileStoreOptions file_options = config.file_store_options();
  file_options.warn = store_warnings::sink(Source::tier);
  // The disk tier. With bundles and no cache layout yet (a read-only image,
  // docs/bundles.md "in place, nothing written"), it is made by the first put
  // a bundle did not serve; with bundles and a cache directory that cannot be
  // opened, the bundles serve alone (one warning).
  std::unique_ptr<Store> disk;
  FileStore* local = nullptr;
  if (!config.bundles.empty() && !cache_layout_exists(config.cache_dir)) {
    disk = std::make_unique<LazyFileTier>(std::move(file_options));
  } else if (auto file = FileStore::open(std::move(file_options)); file) {
    local = file->get();
    disk = std::move(*file);
  } else if (config.bundles.empty()) {
    return tl::unexpected(file.error());
  } else {
    warn_line(file.error().message + "; hits come from the bundles only and nothing is cached (fix the cache "
                                     "directory, or point KCACHE_DIR at one kcache can use)");
  }
  std::vector<std::unique_ptr<Store>> tiers;
  if (config.memory_size_bytes > 0) {
    tiers.push_back(std::make_unique<MemoryStore>(config.memory_size_bytes));
  }
  const bool bundle_tier = add_bundle_tier(config, tiers);
  if (disk) {
    tiers.push_back(std::move(disk));
  }
  std::vector<std::string> remotes;
  add_remote_tiers(config, tiers, remotes, local);
  const std::size_t first_remote = tiers.size() - remotes.size();
  auto chain = std::make_unique<TieredStore>(std::move(tiers), store_warnings::sink(Source::layer));
  if (bundle_tier) {
    chain->set_tier_location(config.memory_size_bytes > 0 ? 1 : 0, "bundles");
  }
  for (std::size_t i = 0; i < remotes.size(); ++i) {
    chain->set_tier_location(first_remote + i, std::move(remotes[i]));
  }
  if (config.put == PutMode::sync) {
    return std::unique_ptr<Store>(std::move(chain));
  }
  // Outermost, so that Cache's put_then releases its lease only after both
  // tiers have the entry.
  WriteBehindOptions queue;
  queue.warn = store_warnings::sink(Source::layer);
  return std::unique_ptr<Store>(std::make_unique<WriteBehindStore>(std::move(chain), std::move(queue)));
}

}  // namespace kcache
