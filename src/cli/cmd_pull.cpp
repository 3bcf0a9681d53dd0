// kcache pull KEY...: fetch entries from the remotes into the local store
// (prefetch), each verified in full before it is published (large ones as
// they arrive, staged in the cache's v1/tmp: memory stays flat).
#include <cstdio>

#include "cache/remote_tiers.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_pull(const Context& ctx, const std::vector<std::string>& key_args) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  std::vector<Key> keys;
  if (int rc = parse_keys(key_args, keys); rc != k_exit_ok) {
    return rc;
  }
  auto local = FileStore::open(config->file_store_options());
  if (!local) {
    return report(local.error());
  }
  auto remotes = open_remote_stores(*config, [](const std::string& line) {
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
  });
  if (remotes.empty()) {
    return report(Error{ErrorCode::invalid_argument, "no usable remote is configured", {}},
                  "set `remote` in the config file, KCACHE_REMOTE, or pass --remote URL");
  }
  std::uint64_t pulled = 0, present = 0, missing = 0, failed = 0;
  for (const Key& key : keys) {
    auto here = (*local)->get(key);
    if (here && here->has_value()) {
      ++present;
      continue;
    }
    bool found = false;
    for (auto& r : remotes) {
      // Verified in full (a bad object is a miss); a large one is streamed
      // into the local store as it arrives, never held whole in memory.
      auto got = r->fetch_into(key, **local);
      if (got && *got == remote::Fetched::miss) {
        continue;
      }
      if (!got) {
        ++failed;
        std::fprintf(stderr, "kcache: error: store %s locally: %s\n", key.hex().c_str(), got.error().describe().c_str());
      } else {
        ++pulled;
      }
      found = true;
      break;
    }
    if (!found) {
      ++missing;
      std::fprintf(stderr, "kcache: %s: not on any remote (or refused; see `kcache remote ping` and warnings)\n",
                   key.hex().c_str());
    }
  }
  print_tally(ctx, {{"pulled", "pulled", pulled},
                    {"already_local", "already local", present},
                    {"missing", "missing", missing},
                    {"failed", "failed", failed}});
  if (failed > 0) {
    return k_exit_error;
  }
  return missing > 0 ? k_exit_miss : k_exit_ok;
}

void register_pull(CLI::App& app, Context& ctx, std::function<int()>& run) {
  static std::vector<std::string> keys;
  CLI::App* sub = app.add_subcommand("pull", "Fetch entries from the remotes into the local cache (verified)");
  sub->add_option("KEY", keys, "Keys to fetch (64 hex characters)")->required();
  sub->footer("Exit 0 when every key is now local; 3 when one is on no remote (or was refused);\n"
              "1 when the local store could not be written; 2 bad usage or no remote.");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_pull(ctx, keys); }; });
}

}  // namespace

KCACHE_COMMAND(pull, register_pull);

}  // namespace kcache::cli
