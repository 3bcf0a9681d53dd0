// kcache remote keygen FILE | kcache remote ping: the team tier's commands.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/remote_tiers.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "store/remote/remote_store.hpp"
#include "store/remote/team_key.hpp"

namespace kcache::cli {
namespace {

int run_keygen(const std::string& file) {
  auto key = remote::generate_team_key_file(file);
  if (!key) {
    report(key.error(), "give a path that does not exist yet; kcache never replaces a key file");
    return k_exit_error;
  }
  // The id identifies the key in `kcache remote ping` and docs; it reveals nothing of it.
  std::printf("wrote a new team key to %s (mode 0600, key id %s)\n", file.c_str(), key->id_hex().c_str());
  std::printf("set remote_key_file = \"%s\" on every host that publishes to or reads from the team cache\n",
              file.c_str());
  return k_exit_ok;
}

int run_ping(const Context& ctx) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  if (config->remote.empty()) {
    return report(Error{ErrorCode::invalid_argument, "no remote is configured", {}},
                  "set `remote` in the config file, KCACHE_REMOTE, or pass --remote URL");
  }
  int rc = k_exit_ok;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& url : config->remote) {
    auto spec = configured_remote_spec(*config, url);
    if (!spec) {
      rc = report(spec.error());
      continue;
    }
    remote::RemoteStoreOptions options;
    options.spec = *spec;
    auto store = remote::RemoteStore::open(options);
    if (!store) {
      rc = report(store.error());
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    auto who = (*store)->describe();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (ctx.json) {
      all.push_back({{"remote", spec->masked()},
                     {"ok", who.has_value()},
                     {"latency_ms", ms},
                     {"server", who ? *who : std::string()},
                     {"error", who ? std::string() : who.error().describe()},
                     {"read_only", spec->read_only}});
    } else if (who) {
      std::printf("%s: %s, %.2f ms%s\n", spec->masked().c_str(), who->c_str(), ms,
                  spec->read_only ? ", read_only" : "");
    }
    if (!who) {
      if (!ctx.json) {
        std::fprintf(stderr, "kcache: error: %s: %s\n", spec->masked().c_str(), who.error().describe().c_str());
      }
      rc = k_exit_error;
    }
  }
  if (ctx.json) {
    std::printf("%s\n", all.dump(2).c_str());
  }
  return rc;
}

void register_remote(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("remote", "The team tier: make a team key, check the remotes");
  sub->require_subcommand(1);
  CLI::App* keygen = sub->add_subcommand("keygen", "Write a new random team key (32 bytes, hex) to FILE, mode 0600");
  static std::string file;
  keygen->add_option("FILE", file, "Where to write the key (must not exist)")->required();
  keygen->callback([&run] { run = [] { return run_keygen(file); }; });
  CLI::App* ping = sub->add_subcommand("ping", "Ask every configured remote who it is and how fast it answers");
  ping->footer("Exit 0 when every remote answered, 1 when one did not. Passwords are never printed.");
  ping->callback([&ctx, &run] { run = [&ctx] { return run_ping(ctx); }; });
}

}  // namespace

KCACHE_COMMAND(remote, register_remote);

}  // namespace kcache::cli
