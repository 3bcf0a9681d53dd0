// kcache get KEY [-o FILE]: fetch a verified payload.
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "kcache/key.hpp"
#include "cli/output_file.hpp"

namespace kcache::cli {
namespace {

struct GetArgs {
  std::string key;
  std::string output;
};

int run_get(const Context& ctx, const GetArgs& args) {
  Artifact entry;
  if (const int status = fetch_entry(ctx, args.key, entry); status != k_exit_ok) {
    return status;
  }
  const Artifact& artifact = entry;
  // No -o is standard output, like `-o -`.
  if (auto ok = write_output(args.output.empty() ? std::string("-") : args.output, artifact.payload); !ok) {
    report(ok.error(), k_output_write_hint);
    return k_exit_error;
  }
  if (ctx.verbose) {
    note("hit: " + format_size(artifact.payload.size()) + " of kind " + artifact.passport.kind + ", verified");
  }
  return k_exit_ok;
}

void register_get(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<GetArgs>();
  CLI::App* sub = app.add_subcommand("get", "Fetch the payload stored under KEY (verified against its passport)");
  sub->add_option("KEY", args->key, "The key: 64 lowercase hex characters")->required();
  sub->add_option("-o,--output", args->output,
                  "Write the payload to FILE instead of stdout (`-` is stdout; a regular file is replaced "
                  "atomically, a device, FIFO or symlink target is written in place)")
      ->type_name("FILE");
  sub->footer("Exit codes: 0 hit, 3 no entry for the key, 2 not a key, 1 the cache cannot be read.");
  sub->callback([&ctx, &run, args] { run = [&ctx, args] { return run_get(ctx, *args); }; });
}

}  // namespace

KCACHE_COMMAND(get, register_get);

}  // namespace kcache::cli
