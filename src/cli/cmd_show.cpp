// kcache show KEY: print the passport of an entry.
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "kcache/key.hpp"

namespace kcache::cli {
namespace {

int run_show(const Context& ctx, const std::string& text) {
  FetchedEntry entry;
  if (const int status = fetch_entry(ctx, text, entry); status != k_exit_ok) {
    return status;
  }
  std::printf("%s\n", entry.passport().to_pretty_json().c_str());
  return k_exit_ok;
}

void register_show(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto key = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("show", "Print the passport of the entry under KEY as JSON");
  sub->add_option("KEY", *key, "The key: 64 lowercase hex characters")->required();
  sub->footer("The passport format is described in docs/passport.md.\n"
              "Exit codes: 0 shown, 3 no entry for the key, 2 not a key, 1 the cache cannot be read.");
  sub->callback([&ctx, &run, key] { run = [&ctx, key] { return run_show(ctx, *key); }; });
}

}  // namespace

KCACHE_COMMAND(show, register_show);

}  // namespace kcache::cli
