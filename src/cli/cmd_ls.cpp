// kcache ls [--json]: list the entries of the on-disk cache.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_ls(const Context& ctx) {
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto entries = (*store)->list();
  if (!entries) {
    return report(entries.error());
  }
  // Most recently used first, then by key so the order is stable.
  std::sort(entries->begin(), entries->end(), [](const EntryInfo& a, const EntryInfo& b) {
    if (a.last_used_unix_ms != b.last_used_unix_ms) {
      return a.last_used_unix_ms > b.last_used_unix_ms;
    }
    return a.key < b.key;
  });
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : *entries) {
      out.push_back({{"key", e.key.hex()},
                     {"kind", e.kind},
                     {"size", e.payload_size},
                     {"created_unix_ms", e.created_unix_ms},
                     {"last_used_unix_ms", e.last_used_unix_ms},
                     {"pinned", e.pinned}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"KEY", "KIND", "SIZE", "CREATED (UTC)", "LAST USED (UTC)"}};
  std::uint64_t total = 0;
  for (const auto& e : *entries) {
    rows.push_back({e.key.hex(), e.kind, format_size(e.payload_size), format_time(e.created_unix_ms),
                    format_time(e.last_used_unix_ms)});
    total += e.payload_size;
  }
  print_table(rows, {2});
  if (ctx.verbose || entries->empty()) {
    note(std::to_string(entries->size()) + " entries, " + format_size(total) + " of payload");
  }
  return k_exit_ok;
}

void register_ls(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("ls", "List the entries of the on-disk cache, most recently used first");
  sub->footer("Use --json for one JSON array of {key, kind, size, created_unix_ms, last_used_unix_ms, pinned}.");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_ls(ctx); }; });
}

}  // namespace

KCACHE_COMMAND(ls, register_ls);

}  // namespace kcache::cli
