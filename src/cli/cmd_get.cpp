// kcache get KEY [-o FILE]: fetch a verified payload.
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "kcache/key.hpp"
#include "util/atomic_write.hpp"

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
  if (args.output.empty()) {
    if (!write_stdout(artifact.payload)) {
      return report(Error{ErrorCode::io, "cannot write to standard output", {}});
    }
  } else {
    if (auto ok = util::write_output_file(args.output, artifact.payload); !ok) {
      return report(ok.error(), "check that the directory of the output file exists and is writable");
    }
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
                  "Write the payload to FILE (atomically: the file is whole or unchanged) instead of stdout")
      ->type_name("FILE");
  sub->footer("Exit codes: 0 hit, 3 no entry for the key, 2 not a key, 1 the cache cannot be read.");
  sub->callback([&ctx, &run, args] { run = [&ctx, args] { return run_get(ctx, *args); }; });
}

}  // namespace

KCACHE_COMMAND(get, register_get);

}  // namespace kcache::cli
