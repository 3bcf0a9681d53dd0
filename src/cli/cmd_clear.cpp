// kcache clear: remove every entry.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_clear(const Context& ctx, bool include_pinned) {
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto removed = (*store)->clear(include_pinned ? ClearPinned::remove : ClearPinned::keep);
  if (!removed) {
    return report(removed.error());
  }
  auto s = (*store)->stats();
  const std::uint64_t pinned_kept = s ? s->pinned_entries : 0;
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"entries_removed", *removed}, {"pinned_kept", pinned_kept}}.dump().c_str());
  } else if (pinned_kept != 0) {
    std::printf("removed %llu entries; kept %llu pinned (`kcache clear --include-pinned` removes them too)\n",
                static_cast<unsigned long long>(*removed), static_cast<unsigned long long>(pinned_kept));
  } else {
    std::printf("removed %llu entries\n", static_cast<unsigned long long>(*removed));
  }
  return k_exit_ok;
}

void register_clear(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("clear", "Remove every entry from the on-disk cache (counters are kept)");
  sub->footer("Safe while other processes use the cache: they see misses and compile again.\n"
              "Pinned entries (`kcache pin`) are kept unless --include-pinned.");
  auto include_pinned = std::make_shared<bool>(false);
  sub->add_flag("--include-pinned", *include_pinned, "Remove pinned entries (and their pins) too");
  sub->callback([&ctx, &run, include_pinned] {
    run = [&ctx, include_pinned] { return run_clear(ctx, *include_pinned); };
  });
}

}  // namespace

KCACHE_COMMAND(clear, register_clear);

}  // namespace kcache::cli
