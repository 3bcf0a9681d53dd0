// kcache verify [--repair]: re-hash every entry in full and list orphans.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_verify(const Context& ctx, bool repair) {
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto r = (*store)->verify(repair ? Repair::yes : Repair::no);
  if (!r) {
    return report(r.error());
  }
  const bool damage_left = r->entries_bad > r->entries_removed;
  if (ctx.json) {
    nlohmann::json j{{"entries_checked", r->entries_checked}, {"entries_ok", r->entries_ok},
                     {"entries_bad", r->entries_bad},         {"entries_removed", r->entries_removed},
                     {"orphans", r->orphans},                 {"orphans_removed", r->orphans_removed},
                     {"problems", r->problems}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& p : r->problems) {
      std::printf("%s\n", p.c_str());
    }
    std::printf("checked %llu entries: %llu ok, %llu damaged%s; %llu orphans%s\n",
                static_cast<unsigned long long>(r->entries_checked), static_cast<unsigned long long>(r->entries_ok),
                static_cast<unsigned long long>(r->entries_bad),
                repair ? (" (" + std::to_string(r->entries_removed) + " removed)").c_str() : "",
                static_cast<unsigned long long>(r->orphans),
                repair ? (" (" + std::to_string(r->orphans_removed) + " removed)").c_str() : "");
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
  sub->add_flag("--repair", *repair, "Remove damaged entries and orphans (payloads without passport, stale temps)");
  sub->footer("Exit codes: 0 every entry verifies (or every damaged one was removed with --repair),\n"
              "4 damaged entries were found and are still there, 1 the cache cannot be read.");
  sub->callback([&ctx, &run, repair] { run = [&ctx, repair] { return run_verify(ctx, *repair); }; });
}

}  // namespace

KCACHE_COMMAND(verify, register_verify);

}  // namespace kcache::cli
