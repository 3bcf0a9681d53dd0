// kcache prune [--max-size SIZE]: evict least recently used entries.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_prune(const Context& ctx, const std::string& size_text) {
  std::uint64_t target = 0;
  if (!size_text.empty()) {
    auto size = parse_size(size_text);
    if (!size) {
      return report(size.error(), "see `kcache prune --help`");
    }
    if (*size == 0) {
      return report(Error{ErrorCode::invalid_argument, "--max-size 0 would keep nothing", {}},
                    "use `kcache clear` to remove every entry");
    }
    target = *size;
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto r = (*store)->prune(target);
  if (!r) {
    return report(r.error());
  }
  if (ctx.json) {
    nlohmann::json j{{"entries_removed", r->entries_removed},
                     {"bytes_removed", r->bytes_removed},
                     {"size_after", r->size_after}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("removed %llu entries (%s); the cache now holds %s\n",
                static_cast<unsigned long long>(r->entries_removed), format_size(r->bytes_removed).c_str(),
                format_size(r->size_after).c_str());
  }
  return k_exit_ok;
}

void register_prune(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto size = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("prune", "Evict least recently used entries down to a size");
  sub->add_option("--max-size", *size, "Size to prune down to, e.g. 1G (default: the configured max_size)")
      ->type_name("SIZE");
  sub->footer("Exit codes: 0 done, 2 bad size, 1 the cache cannot be written.");
  sub->callback([&ctx, &run, size] { run = [&ctx, size] { return run_prune(ctx, *size); }; });
}

}  // namespace

KCACHE_COMMAND(prune, register_prune);

}  // namespace kcache::cli
