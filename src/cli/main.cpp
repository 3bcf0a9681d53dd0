// The kcache command line. Subcommands register themselves (command.hpp).
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"

namespace kcache::cli {

namespace {
std::map<std::string, Registration>& registry() {
  static std::map<std::string, Registration> r;
  return r;
}
}  // namespace

bool register_command(const std::string& name, Registration registration) {
  registry().emplace(name, std::move(registration));
  return true;
}

const std::map<std::string, Registration>& commands() { return registry(); }

}  // namespace kcache::cli

int main(int argc, char** argv) {
  using namespace kcache::cli;
  CLI::App app{"kcache: compile GPU code once, and never return a wrong binary.", "kcache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kcache ") + KCACHE_VERSION);
  Context ctx;
  std::string cache_dir;
  app.add_option_function<std::string>(
         "--cache-dir", [&](const std::string& v) { ctx.overrides["cache_dir"] = v; },
         "Cache directory (overrides KCACHE_DIR and the config file)")
      ->type_name("DIR");
  app.add_flag("-v,--verbose", ctx.verbose, "Say more");
  std::function<int()> run;
  for (const auto& [name, reg] : commands()) {
    reg(app, ctx, run);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!run) {
    std::fputs("kcache: no command given; see kcache --help\n", stderr);
    return k_exit_usage;
  }
  return run();
}
