// The kcache command line. Subcommands register themselves (command.hpp);
// this file only holds the global options, the registry, and the mapping of
// command-line mistakes to exit code 2 with a pointer to --help.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cache/store_warnings.hpp"
#include "cli/cmd_nvcc.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output_file.hpp"
#include "kcache/request_stats.hpp"

namespace kcache::cli {

namespace {
std::map<std::string, Registration>& registry() {
  static std::map<std::string, Registration> r;
  return r;
}

// The deepest subcommand the user named, for "see `kcache put --help`".
std::string chosen_command(CLI::App& app) {
  std::string path;
  CLI::App* at = &app;
  for (;;) {
    const auto subs = at->get_subcommands();
    if (subs.empty()) {
      break;
    }
    at = subs.front();
    path += " " + at->get_name();
  }
  return "kcache" + path;
}

// The first argument that is neither an option nor the value of a global
// option: what the user meant as the command.
std::string first_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cache-dir" || arg == "--max-size" || arg == "--config" || arg == "--set" || arg == "--remote") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] != '-') {
      return arg;
    }
  }
  return {};
}

// True for `kcache --version` with nothing but global flags beside it.
bool asks_only_version(int argc, char** argv) {
  bool version = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--version") {
      version = true;
    } else if (arg == "--help" || arg == "-h" || arg == "--help-all") {
      return false;
    }
  }
  return version;
}
}  // namespace

bool register_command(const std::string& name, Registration registration) {
  // KCACHE_COMMAND(why_miss, ...) is the command `why-miss`.
  std::string spelled = name;
  std::replace(spelled.begin(), spelled.end(), '_', '-');
  registry().emplace(std::move(spelled), std::move(registration));
  return true;
}

const std::map<std::string, Registration>& commands() { return registry(); }

namespace {
std::map<std::string, QuickParser>& quick_registry() {
  static std::map<std::string, QuickParser> r;
  return r;
}

// What the process ends with once a command ran, however it was parsed.
int finish_command(const std::function<int()>& run) {
  const int status = run();
  // A warning held back in case the failing tier said it better (store_warnings.hpp).
  kcache::store_warnings::flush();
  // Every command's printed output counts: a lost line is a failure (exit 1).
  if (!finish_standard_output() && status == k_exit_ok) {
    return k_exit_error;
  }
  return status;
}

// `kcache <command> ...` taken by the command's quick parser, when it has one
// and KCACHE_CLI_PARSER allows it: the exit status, or nothing for CLI11.
std::optional<int> run_quickly(int argc, char** argv, Context& ctx) {
  if (argc < 2) {
    return std::nullopt;
  }
  const auto it = quick_registry().find(argv[1]);
  const char* mode = std::getenv("KCACHE_CLI_PARSER");
  const std::string_view how = mode == nullptr ? "" : mode;
  if (it == quick_registry().end() || how == "full") {
    return std::nullopt;
  }
  std::vector<std::string_view> words(argv + 2, argv + argc);
  std::function<int()> run;
  if (!it->second(words, ctx, run)) {
    if (how == "quick") {
      std::fprintf(stderr, "kcache: error: KCACHE_CLI_PARSER=quick: the quick parser of `%s` does not take these "
                           "arguments\nkcache: hint: unset KCACHE_CLI_PARSER\n", argv[1]);
      return k_exit_usage;
    }
    return std::nullopt;
  }
  return finish_command(run);
}
}  // namespace

bool register_quick_parser(const std::string& name, QuickParser parser) {
  quick_registry().emplace(name, parser);
  return true;
}

}  // namespace kcache::cli

int main(int argc, char** argv) {
  using namespace kcache::cli;
  // Requests this command serves or compiles count as the kcache command's (`kcache stats`).
  kcache::set_default_request_route("cli");
  // `kcache nvcc ARGS...`, `kcache /path/to/nvcc ARGS...` (a compiler
  // launcher) and kcache installed as `nvcc`: every argument is nvcc's, so
  // none goes through the option parsers (cli/cmd_nvcc.hpp).
  const bool nvcc_launch = is_nvcc_launch(argc, argv);
  // `kcache worker` talks to its pool over pipes and ends on its own when the
  // pool is gone; nvcc's messages go where nvcc's would, SIGPIPE included.
  prepare_standard_streams(/*handle_sigpipe=*/!nvcc_launch && first_word(argc, argv) != "worker");
  if (nvcc_launch) {
    return run_nvcc_launch(argc, argv);
  }
  {
    Context quick_ctx;
    if (const auto status = run_quickly(argc, argv, quick_ctx)) {
      return *status;
    }
  }
  CLI::App app{"kcache: compile GPU code once, and never return a wrong binary.\n"
               "Settings: `kcache config`. Exit codes: 0 ok, 1 failed, 2 bad usage or setting, 3 miss,\n"
               "4 damaged entries, 5 compile failed, 6 CUDA toolkit missing, 7 plan entry failed.",
               "kcache"};
  app.require_subcommand(1);
  // Global options may also be given after the subcommand (`kcache ls --json`).
  app.fallthrough();
  app.set_version_flag("--version", std::string("kcache ") + KCACHE_VERSION);
  Context ctx;
  app.add_option_function<std::string>(
         "--cache-dir", [&](const std::string& v) { ctx.overrides["cache_dir"] = v; },
         "Cache directory (overrides KCACHE_DIR and the config file)")
      ->type_name("DIR");
  app.add_option_function<std::string>(
         "--max-size", [&](const std::string& v) { ctx.overrides["max_size"] = v; },
         "Size cap of the on-disk cache, e.g. 10G (overrides KCACHE_MAX_SIZE)")
      ->type_name("SIZE");
  app.add_option_function<std::string>(
         "--config", [&](const std::string& v) { ctx.config_file = v; },
         "Config file to read instead of $KCACHE_CONFIG or ~/.config/kcache/kcache.toml")
      ->type_name("FILE");
  app.add_option_function<std::vector<std::string>>(
         "--set",
         [&](const std::vector<std::string>& items) {
           for (const auto& item : items) {
             const auto eq = item.find('=');
             ctx.overrides[item.substr(0, eq)] = eq == std::string::npos ? std::string() : item.substr(eq + 1);
           }
         },
         "Override any setting for this run, e.g. --set fsync=none (see `kcache config`)")
      ->type_name("KEY=VALUE");
  app.add_option_function<std::vector<std::string>>(
         "--remote",
         [&](const std::vector<std::string>& urls) {
           std::string& list = ctx.overrides["remote"];
           for (const auto& url : urls) {
             list += (list.empty() ? "" : " ") + url;
           }
         },
         "A remote tier URL (repeatable; replaces KCACHE_REMOTE and the config file's list)")
      ->type_name("URL")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("-v,--verbose", ctx.verbose, "Say more on stderr");
  app.add_flag("--json", ctx.json, "Machine-readable output (ls, stats, config, verify, put, prune, clear)");
  std::function<int()> run;
  // Building every command's options costs more than a whole cache hit
  // (docs/performance.md, "Process start"): when the command is known, only
  // it is registered; help and mistakes see them all.
  const std::string named = first_word(argc, argv);
  if (const auto it = commands().find(named); it != commands().end()) {
    it->second(app, ctx, run);
  } else if (named.empty() && asks_only_version(argc, argv)) {
    // `kcache --version` prints and exits while parsing: no command is needed.
  } else {
    for (const auto& [name, reg] : commands()) {
      reg(app, ctx, run);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty()) {
      // CLI11 says "A subcommand is required" for a misspelt command; say what was wrong.
      if (const std::string& word = named; !word.empty() && !commands().contains(word)) {
        std::string known;
        for (const auto& [name, reg] : commands()) {
          known += " " + name;
        }
        std::fprintf(stderr, "kcache: error: unknown command '%s'\nkcache: hint: commands:%s (see `kcache --help`)\n",
                     word.c_str(), known.c_str());
        return k_exit_usage;
      }
    }
    const std::string cmd = chosen_command(app);
    std::fprintf(stderr, "kcache: error: %s\nkcache: hint: see `%s --help`\n", e.what(), cmd.c_str());
    return k_exit_usage;
  }
  if (!run) {
    std::fputs("kcache: error: no command given\nkcache: hint: see `kcache --help`\n", stderr);
    return k_exit_usage;
  }
  return finish_command(run);
}
