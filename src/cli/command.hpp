// cli/command.hpp: how subcommands plug into the kcache command.
//
// Each cmd_<name>.cpp defines a registration function and registers it with
// KCACHE_COMMAND(name, fn). main.cpp sorts the commands by name, calls each
// registration function, and runs the one the user chose. A command's
// callback returns the process exit code (see exit_codes.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "kcache/config.hpp"

namespace kcache::cli {

// The command reads payloads of this size or more through a mapping
// (FileStoreOptions::map_min_bytes; 155 KB in a new process: 3 µs mapped
// against 160 µs read into a fresh buffer).
inline constexpr std::size_t k_command_map_min_bytes = 16 * 1024;

// What every command can use: the global options and the settings.
class Context {
 public:
  // Settings overridden on the command line (`--cache-dir`, `--max-size`, ...),
  // as config-file key -> value.
  std::map<std::string, std::string> overrides;
  std::filesystem::path config_file;  // --config FILE (empty: $KCACHE_CONFIG, then the XDG path)
  bool json = false;     // --json where a command supports it
  bool verbose = false;  // -v

  // Loads the settings (command line > environment > file > default). With
  // `problems`, bad settings outside the command line are collected there
  // instead of failing the load (ConfigInputs::problems).
  Result<Config> config(std::vector<Error>* problems = nullptr) const {
    ConfigInputs inputs;
    inputs.command_line = overrides;
    inputs.config_file = config_file;
    inputs.problems = problems;
    auto config = Config::load_from(inputs);
    if (config) {
      // A command is a new process: a fresh buffer costs a page fault and a
      // zero-fill a page, a mapping of cached pages one fault per 16 of them.
      config->map_min_bytes = k_command_map_min_bytes;
    }
    if (!config && config.error().code == ErrorCode::not_found) {
      // A --config or $KCACHE_CONFIG file that does not exist is a bad setting (exit 2), as a bad value is.
      Error e = config.error();
      e.code = ErrorCode::invalid_argument;
      return tl::unexpected(std::move(e));
    }
    return config;
  }
};

// Adds the subcommand to `app`; `run` is set to the code to execute when it is chosen.
using Registration = std::function<void(CLI::App& app, Context& ctx, std::function<int()>& run)>;

// Registers a command; called from static initialisers in cmd_*.cpp.
bool register_command(const std::string& name, Registration registration);
const std::map<std::string, Registration>& commands();

// A command's quick parser: for the plainest spellings of its arguments (the
// words after the command's name), sets `run` as its CLI11 registration would
// and returns true; returns false, having changed nothing, for anything else,
// which then goes through CLI11 as always. Building CLI11's options costs a
// fifth of a whole cache hit's instructions (docs/performance.md, "Process
// start"), and `kcache compile` is the command a build runs thousands of times.
// KCACHE_CLI_PARSER=full skips the quick parsers; =quick makes arguments a
// quick parser does not take a usage error (both for tests, docs/cli.md).
using QuickParser = bool (*)(const std::vector<std::string_view>& words, Context& ctx, std::function<int()>& run);
bool register_quick_parser(const std::string& name, QuickParser parser);

}  // namespace kcache::cli

#define KCACHE_COMMAND(name, fn) \
  static const bool kcache_command_registered_##name = ::kcache::cli::register_command(#name, fn)
#define KCACHE_QUICK_PARSER(name, fn) \
  static const bool kcache_quick_parser_registered_##name = ::kcache::cli::register_quick_parser(#name, fn)
