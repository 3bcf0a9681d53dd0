// kcache put FILE [--kind K] [--label NAME=VALUE]... [--build-ms MS]: store a file by content.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "kcache/blob.hpp"
#include "util/fd.hpp"
#include "util/input_file.hpp"

namespace kcache::cli {
namespace {

struct PutArgs {
  std::string file;
  std::string kind = "blob";
  std::vector<std::string> labels;
  std::uint64_t build_ms = 0;
};

// Opens the input: standard input for "-", else a regular file. Returns the
// descriptor (owned by `holder` unless it is standard input).
Result<int> open_input(const std::string& file, util::Fd& holder) {
  if (file == "-") {
    return STDIN_FILENO;
  }
  // Names what is wrong: missing, a directory, a FIFO (never blocks: util/input_file.hpp).
  auto input = util::open_input_file(file, {});
  if (!input) {
    return tl::unexpected(input.error());
  }
  holder = std::move(input->fd);
  return holder.get();
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
  // The kind and labels are checked before anything is read.
  if (auto checked = make_blob_passport(args.kind, 0, {}, labels); !checked) {
    return report(checked.error());
  }
  util::Fd holder;
  auto fd = open_input(args.file, holder);
  if (!fd) {
    return report(fd.error(), "give the path of an existing file, or - to read standard input");
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  // Streamed: the file is hashed and staged in bounded chunks, never held in
  // memory whole (docs/cli.md, "Large files").
  auto put = (*store)->put_stream(*fd, [&](std::uint64_t size, const std::array<std::uint8_t, 32>& sha256) {
    auto passport = make_blob_passport(args.kind, size, sha256, labels);
    if (passport) {
      // What the file took to build: the cost eviction weighs (not in the key).
      passport->compile_duration_us = args.build_ms * 1000;
    }
    return passport;
  });
  if (!put) {
    return report(put.error());
  }
  const PutOutcome outcome = put->outcome;
  const Passport& passport = put->passport;
  const bool skipped = (*store)->degraded();
  const std::string key = passport.key.hex();
  if (ctx.json) {
    nlohmann::json j{{"key", key},
                     {"outcome", skipped ? "skipped" : outcome == PutOutcome::stored ? "stored" : "already_present"},
                     {"kind", passport.kind},
                     {"size", passport.payload_size}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", key.c_str());
  }
  if (skipped) {
    note("the cache is not writable, so nothing was stored (see the warning above)");
    return k_exit_error;
  }
  if (ctx.verbose) {
    note(std::string(outcome == PutOutcome::stored ? "stored " : "already present: ") +
         format_size(passport.payload_size) + " as kind " + passport.kind);
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
  sub->add_option("--build-ms", args->build_ms,
                  "How long the file took to build, in milliseconds: kept as the passport's compile_duration_us "
                  "so that eviction_policy = cost keeps it over entries cheaper to rebuild (default 0: free to "
                  "rebuild, evicted first)")
      ->type_name("MS")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1'000'000'000}));
  sub->footer("The key is SHA-256 over the kind and the file's content, never its name or path.\n"
              "Exit codes: 0 stored (or already present), 1 not stored, 2 bad usage.");
  sub->callback([&ctx, &run, args] { run = [&ctx, args] { return run_put(ctx, *args); }; });
}

}  // namespace

KCACHE_COMMAND(put, register_put);

}  // namespace kcache::cli
