// kcache push [KEY...|--all]: upload local entries to every writable remote
// (a CI job seeds the team cache).
#include <cstdio>

#include <fmt/format.h>

#include "cache/remote_tiers.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

struct PushArgs {
  std::vector<std::string> keys;
  bool all = false;
};

int run_push(const Context& ctx, const PushArgs& args) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  if (args.keys.empty() == !args.all) {
    return report(Error{ErrorCode::invalid_argument, "give KEY... or --all (not both)", {}}, "see `kcache push --help`");
  }
  std::vector<Key> keys;
  if (int rc = parse_keys(args.keys, keys); rc != k_exit_ok) {
    return rc;
  }
  auto local = FileStore::open(config->file_store_options());
  if (!local) {
    return report(local.error());
  }
  if (args.all) {
    auto entries = (*local)->list();
    if (!entries) {
      return report(entries.error());
    }
    for (const auto& e : *entries) {
      keys.push_back(e.key);
    }
  }
  bool warned = false;
  auto remotes = open_remote_stores(*config, [&](const std::string& line) {
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    warned = true;
  });
  std::size_t writable = 0;
  for (const auto& r : remotes) {
    writable += r->writable() ? 1 : 0;
  }
  if (writable == 0) {
    return report(Error{ErrorCode::invalid_argument,
                        warned ? "no usable writable remote (see the warning above)" : "no writable remote is configured",
                        {}},
                  "set `remote` (not read_only) in the config file, KCACHE_REMOTE, or pass --remote URL");
  }
  std::uint64_t uploaded = 0, present = 0, missing = 0, failed = 0;
  for (const Key& key : keys) {
    // The payload stays in its file (checked there in bounded chunks) and is
    // read in parts as it is uploaded: memory does not grow with the entry.
    auto a = (*local)->open_payload(key);
    if (!a || !a->has_value()) {
      ++missing;
      if (!a) {
        std::fprintf(stderr, "kcache: error: %s: %s\n", key.hex().c_str(), a.error().describe().c_str());
        ++failed;
      }
      continue;
    }
    for (auto& r : remotes) {
      if (!r->writable()) {
        continue;
      }
      auto put = r->put_file(**a);  // read and verified from the local store just now
      if (!put) {
        ++failed;
        std::fprintf(stderr, "kcache: error: push %s to %s: %s\n", key.hex().c_str(), r->spec().masked().c_str(),
                     put.error().describe().c_str());
      } else if (*put == PutOutcome::stored) {
        ++uploaded;
      } else {
        ++present;
      }
    }
  }
  print_tally(ctx, {{"uploaded", "uploaded", uploaded},
                    {"already_present", "already present", present},
                    {"not_local", "not in the local cache", missing},
                    {"failed", "failed", failed}});
  return failed == 0 && (args.all || missing == 0) ? k_exit_ok : k_exit_error;
}

void register_push(CLI::App& app, Context& ctx, std::function<int()>& run) {
  static PushArgs args;
  CLI::App* sub = app.add_subcommand("push", "Upload local entries to every writable remote");
  sub->add_option("KEY", args.keys, "Keys to upload (64 hex characters)");
  sub->add_flag("--all", args.all, "Upload every entry of the local cache");
  sub->footer("Exit 0 when every entry was uploaded or already there; 1 when one was not in the local cache\n"
              "or an upload failed; 2 bad usage or no writable remote.");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_push(ctx, args); }; });
}

}  // namespace

KCACHE_COMMAND(push, register_push);

}  // namespace kcache::cli
