// kcache verify [--repair]: re-hash every entry in full and list orphans.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_verify(const Context& ctx, bool repair) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  FileStoreOptions options = config->file_store_options();
  // verify sweeps (and counts) temporary files itself; without --repair it changes nothing.
  options.sweep_on_open = OpenSweep::no;
  // A layout directory that is not a directory keeps the store from opening:
  // --repair moves it aside first.
  std::vector<std::string> layout;
  if (repair) {
    auto fixed = FileStore::repair_layout(options);
    if (!fixed) {
      return report(fixed.error());
    }
    layout = std::move(*fixed);
  }
  auto store = FileStore::open(options);
  if (!store) {
    return report(store.error());
  }
  auto r = (*store)->verify(repair ? Repair::yes : Repair::no);
  if (!r) {
    return report(r.error());
  }
  r->problems.insert(r->problems.begin(), layout.begin(), layout.end());
  r->orphans += layout.size();
  r->orphans_removed += layout.size();
  const bool damage_left = r->entries_bad > r->entries_removed;
  const auto removed = [repair](std::uint64_t n) { return repair ? " (" + std::to_string(n) + " removed)" : std::string(); };
  if (ctx.json) {
    nlohmann::json j{{"entries_checked", r->entries_checked},
                     {"entries_ok", r->entries_ok},
                     {"entries_bad", r->entries_bad},
                     {"entries_removed", r->entries_removed},
                     {"orphans", r->orphans},
                     {"orphans_removed", r->orphans_removed},
                     {"stale_temps", r->stale_temps},
                     {"stale_temps_removed", r->stale_temps_removed},
                     {"layout_repaired", layout.size()},
                     {"counted_entries", r->counted_entries},
                     {"counted_bytes", r->counted_bytes},
                     {"disk_entries", r->disk_entries},
                     {"disk_bytes", r->disk_bytes},
                     {"counters_resynced", r->counters_resynced},
                     {"reserved_bytes_released", r->reserved_bytes_released},
                     {"problems", r->problems}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& p : r->problems) {
      std::printf("%s\n", p.c_str());
    }
    std::printf("checked %llu entries: %llu ok, %llu damaged%s; %llu orphans%s, of them %llu stale temporary files%s\n",
                static_cast<unsigned long long>(r->entries_checked), static_cast<unsigned long long>(r->entries_ok),
                static_cast<unsigned long long>(r->entries_bad), removed(r->entries_removed).c_str(),
                static_cast<unsigned long long>(r->orphans), removed(r->orphans_removed).c_str(),
                static_cast<unsigned long long>(r->stale_temps), removed(r->stale_temps_removed).c_str());
    if (r->counted_entries != r->disk_entries || r->counted_bytes != r->disk_bytes) {
      std::printf("size accounting: %llu entries (%s) counted, %llu entries (%s) on disk%s\n",
                  static_cast<unsigned long long>(r->counted_entries), format_size(r->counted_bytes).c_str(),
                  static_cast<unsigned long long>(r->disk_entries), format_size(r->disk_bytes).c_str(),
                  r->counters_resynced ? ": re-synced" : " (run `kcache verify --repair` to re-sync)");
    }
  }
  if (damage_left) {
    note("damaged entries are never served; run `kcache verify --repair` to remove them");
    return k_exit_corrupt;
  }
  return k_exit_ok;
}

void register_verify(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto repair = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("verify", "Re-hash every entry against its passport and list orphans");
  sub->add_flag("--repair", *repair,
                "Remove damaged entries and orphans (payloads without passport, temporary files of writers that are "
                "gone), re-sync the size accounting with the disk, and move aside a layout directory that is not a "
                "directory");
  sub->footer("Exit codes: 0 every entry verifies (or every damaged one was removed with --repair),\n"
              "4 damaged entries (or a damaged layout) were found and are still there, 1 the cache cannot be read.");
  sub->callback([&ctx, &run, repair] { run = [&ctx, repair] { return run_verify(ctx, *repair); }; });
}

}  // namespace

KCACHE_COMMAND(verify, register_verify);

}  // namespace kcache::cli
