// kcache get KEY [-o FILE]: fetch a verified payload.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "kcache/key.hpp"
#include "cli/output_file.hpp"
#include "util/atomic_write.hpp"

namespace kcache::cli {
namespace {

struct GetArgs {
  std::string key;
  std::string output;
};

int run_get(const Context& ctx, const GetArgs& args) {
  FetchedEntry entry;
  if (const int status = fetch_entry(ctx, args.key, entry); status != k_exit_ok) {
    return status;
  }
  // The payload is copied from its file in bounded chunks (sendfile), never
  // held in memory whole: a multi-GiB entry costs a few MiB. No -o is
  // standard output, like `-o -`; other outputs follow docs/cli.md "Output files".
  const std::string output = args.output.empty() ? std::string("-") : args.output;
  // Whether the copy itself found the entry gone (not the output's missing directory, also not_found).
  bool removed = false;
  const auto copy = [&](int fd, std::string_view name) {
    auto copied = entry.copy_to(fd, name);
    removed = !copied && copied.error().code == ErrorCode::not_found;
    return copied;
  };
  Result<void> written;
  if (output == "-") {
    std::fflush(stdout);
    written = copy(STDOUT_FILENO, "to standard output");
  } else {
    written = util::write_output_file_with(output, [&](int fd) { return copy(fd, output); });
  }
  if (!written) {
    // An entry removed while it was copied (another process's clear or
    // prune) is a miss; a regular output is left as it was.
    if (removed) {
      note(written.error().message);
      return k_exit_miss;
    }
    // A damaged payload (exit 4) is the cache's; anything else is the output's.
    if (written.error().code == ErrorCode::corrupt) {
      return report(written.error());
    }
    report(written.error(), k_output_write_hint);
    return k_exit_error;
  }
  if (ctx.verbose) {
    note("hit: " + format_size(entry.size()) + " of kind " + entry.passport().kind + ", verified, from the " +
         entry.tier() + " tier");
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
