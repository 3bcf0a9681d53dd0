// kcache config [KEY] [--json]: the effective settings and where each came from.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

int run_config(const Context& ctx, const std::string& only) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error(), "see `kcache config --help` and docs/configuration.md for every setting");
  }
  const auto rows = config->rows();
  if (!only.empty()) {
    for (const auto& row : rows) {
      if (row.key == only || row.env == only) {
        std::printf("%s\n", row.value.c_str());
        return k_exit_ok;
      }
    }
    std::string known;
    for (const auto& row : rows) {
      known += " " + row.key;
    }
    return report(Error{ErrorCode::invalid_argument, "no setting named '" + only + "'", {}},
                  "known settings:" + known);
  }
  if (ctx.json) {
    nlohmann::json settings = nlohmann::json::array();
    for (const auto& row : rows) {
      settings.push_back({{"key", row.key},
                          {"env", row.env},
                          {"value", row.value},
                          {"source", std::string(to_string(row.source))},
                          {"default", row.default_value},
                          {"accepted", row.accepted},
                          {"description", row.description}});
    }
    nlohmann::json j{{"config_file", config->config_file.string()}, {"settings", settings}};
    std::printf("%s\n", j.dump(2).c_str());
    return k_exit_ok;
  }
  std::vector<std::vector<std::string>> table{{"SETTING", "VALUE", "SOURCE", "ENVIRONMENT"}};
  for (const auto& row : rows) {
    std::string source(to_string(row.source));
    if (row.source == SettingSource::config_file) {
      source += " " + config->config_file.string();
    }
    table.push_back({row.key, row.value.empty() ? "\"\"" : row.value, source, row.env});
  }
  print_table(table);
  std::printf("\nconfig file: %s\n",
              config->config_file.empty() ? "none (looked at $KCACHE_CONFIG, then $XDG_CONFIG_HOME/kcache/kcache.toml)"
                                          : config->config_file.string().c_str());
  if (ctx.verbose) {
    std::printf("\n");
    for (const auto& row : rows) {
      std::printf("%s: %s\n  accepts: %s\n  default: %s\n", row.key.c_str(), row.description.c_str(),
                  row.accepted.c_str(), row.default_value.c_str());
    }
  }
  return k_exit_ok;
}

void register_config(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto key = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("config", "Show every setting, its value and where it came from");
  sub->add_option("KEY", *key, "Print only this setting's value (config key or environment variable)");
  sub->footer("Precedence: command line (--cache-dir, --max-size, --set KEY=VALUE) > environment (KCACHE_*)\n"
              "> config file (--config, $KCACHE_CONFIG, $XDG_CONFIG_HOME/kcache/kcache.toml) > default.\n"
              "-v also prints what each setting does and accepts.");
  sub->callback([&ctx, &run, key] { run = [&ctx, key] { return run_config(ctx, *key); }; });
}

}  // namespace

KCACHE_COMMAND(config, register_config);

}  // namespace kcache::cli
