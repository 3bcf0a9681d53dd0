// kcache ls [--json]: list the entries of the on-disk cache and of the bundle tier.
#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cache/lazy_file_tier.hpp"
#include "cli/output.hpp"
#include "kcache/config.hpp"

namespace kcache::cli {
namespace {

int run_ls(const Context& ctx) {
  // A read-only bundle image (bundles set, no cache layout yet): the disk holds
  // nothing and is not created just to be listed (docs/bundles.md).
  auto config = ctx.config();
  const bool image = config && !config->bundles.empty() && !cache_layout_exists(config->cache_dir);
  Result<std::vector<EntryInfo>> entries = std::vector<EntryInfo>{};
  if (!image) {
    auto store = open_file_store(ctx);
    if (!store) {
      return report(store.error());
    }
    entries = (*store)->list();
  }
  if (!entries) {
    return report(entries.error());
  }
  // The bundle tier's entries that the disk does not hold (the `bundles`
  // setting): a key in both is listed once, as the disk's.
  std::vector<bool> bundled(entries->size(), false);
  if (config) {
    if (auto bundles = open_configured_bundle_tier(*config)) {
      std::unordered_set<std::string> on_disk;
      for (const auto& e : *entries) {
        on_disk.insert(e.key.hex());
      }
      if (auto in_bundles = bundles->list(); in_bundles) {
        for (auto& e : *in_bundles) {
          if (on_disk.insert(e.key.hex()).second) {
            entries->push_back(std::move(e));
            bundled.push_back(true);
          }
        }
      }
    }
  }
  std::vector<std::size_t> order(entries->size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  // Most recently used first (bundle entries, never used, last), then by key
  // so the order is stable.
  const auto& all = *entries;
  std::sort(order.begin(), order.end(), [&all](std::size_t a, std::size_t b) {
    if (all[a].last_used_unix_ms != all[b].last_used_unix_ms) {
      return all[a].last_used_unix_ms > all[b].last_used_unix_ms;
    }
    return all[a].key < all[b].key;
  });
  const bool any_bundled = std::find(bundled.begin(), bundled.end(), true) != bundled.end();
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const std::size_t i : order) {
      const auto& e = all[i];
      out.push_back({{"key", e.key.hex()},
                     {"kind", e.kind},
                     {"size", e.payload_size},
                     {"created_unix_ms", e.created_unix_ms},
                     {"last_used_unix_ms", e.last_used_unix_ms},
                     {"pinned", e.pinned},
                     {"tier", bundled[i] ? "bundle" : "disk"}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"KEY", "KIND", "SIZE", "CREATED (UTC)", "LAST USED (UTC)"}};
  if (any_bundled) {
    rows[0].push_back("TIER");
  }
  std::uint64_t total = 0;
  for (const std::size_t i : order) {
    const auto& e = all[i];
    rows.push_back({e.key.hex(), e.kind, format_size(e.payload_size), format_time(e.created_unix_ms),
                    format_time(e.last_used_unix_ms)});
    if (any_bundled) {
      rows.back().push_back(bundled[i] ? "bundle" : "disk");
    }
    total += e.payload_size;
  }
  print_table(rows, {2});
  if (ctx.verbose || entries->empty()) {
    note(std::to_string(entries->size()) + " entries, " + format_size(total) + " of payload");
  }
  return k_exit_ok;
}

void register_ls(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand(
      "ls", "List the entries of the on-disk cache, most recently used first, then those of the bundle tier");
  sub->footer("Use --json for one JSON array of {key, kind, size, created_unix_ms, last_used_unix_ms, pinned, tier}.\n"
              "tier is disk or bundle (the `bundles` setting; a key in both is listed once, as disk).");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_ls(ctx); }; });
}

}  // namespace

KCACHE_COMMAND(ls, register_ls);

}  // namespace kcache::cli
