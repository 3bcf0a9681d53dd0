// kcache put FILE [--kind K] [--label NAME=VALUE]...: store a file by content.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "kcache/blob.hpp"

namespace kcache::cli {
namespace {

struct PutArgs {
  std::string file;
  std::string kind = "blob";
  std::vector<std::string> labels;
};

Result<std::string> read_input(const std::string& file) {
  std::ostringstream buffer;
  if (file == "-") {
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  // Names what is wrong: missing, a directory, a FIFO (never opened: it would block).
  if (auto ok = check_input_file(file); !ok) {
    return tl::unexpected(ok.error());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return make_errno_error(errno, "cannot open '" + file + "'");
  }
  buffer << in.rdbuf();
  if (in.bad()) {
    return make_errno_error(errno, "cannot read '" + file + "'");
  }
  return buffer.str();
}

int run_put(const Context& ctx, const PutArgs& args) {
  std::map<std::string, std::string> labels;
  for (const auto& l : args.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      return report(Error{ErrorCode::invalid_argument, "label '" + l + "' is not NAME=VALUE", {}},
                    "write labels as --label name=value");
    }
    labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  auto bytes = read_input(args.file);
  if (!bytes) {
    return report(bytes.error(), "give the path of an existing file, or - to read standard input");
  }
  auto artifact = make_blob(args.kind, std::move(*bytes), std::move(labels));
  if (!artifact) {
    return report(artifact.error());
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  auto outcome = (*store)->put(*artifact);
  if (!outcome) {
    return report(outcome.error());
  }
  const bool skipped = (*store)->degraded();
  const std::string key = artifact->passport.key.hex();
  if (ctx.json) {
    nlohmann::json j{{"key", key},
                     {"outcome", skipped ? "skipped" : *outcome == PutOutcome::stored ? "stored" : "already_present"},
                     {"kind", artifact->passport.kind},
                     {"size", artifact->passport.payload_size}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", key.c_str());
  }
  if (skipped) {
    note("the cache is not writable, so nothing was stored (see the warning above)");
    return k_exit_error;
  }
  if (ctx.verbose) {
    note(std::string(*outcome == PutOutcome::stored ? "stored " : "already present: ") +
         format_size(artifact->passport.payload_size) + " as kind " + artifact->passport.kind);
  }
  return k_exit_ok;
}

void register_put(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<PutArgs>();
  CLI::App* sub = app.add_subcommand("put", "Store a file in the cache by its content and print its key");
  sub->add_option("FILE", args->file, "The file to store (- for standard input)")->required();
  sub->add_option("-k,--kind", args->kind, "Artifact kind: cubin, ptx, engine, ... ([a-z0-9_-], default blob)")
      ->type_name("KIND");
  sub->add_option("-l,--label", args->labels, "A free-form label kept in the passport (repeatable)")
      ->type_name("NAME=VALUE");
  sub->footer("The key is SHA-256 over the kind and the file's content, never its name or path.\n"
              "Exit codes: 0 stored (or already present), 1 not stored, 2 bad usage.");
  sub->callback([&ctx, &run, args] { run = [&ctx, args] { return run_put(ctx, *args); }; });
}

}  // namespace

KCACHE_COMMAND(put, register_put);

}  // namespace kcache::cli
