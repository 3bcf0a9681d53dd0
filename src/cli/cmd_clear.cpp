// kcache clear: remove every entry.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_clear(const Context& ctx) {
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto removed = (*store)->clear();
  if (!removed) {
    return report(removed.error());
  }
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"entries_removed", *removed}}.dump().c_str());
  } else {
    std::printf("removed %llu entries\n", static_cast<unsigned long long>(*removed));
  }
  return k_exit_ok;
}

void register_clear(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("clear", "Remove every entry from the on-disk cache (counters are kept)");
  sub->footer("Safe while other processes use the cache: they see misses and compile again.");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_clear(ctx); }; });
}

}  // namespace

KCACHE_COMMAND(clear, register_clear);

}  // namespace kcache::cli
