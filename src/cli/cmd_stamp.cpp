// `kcache stamp FILE.onnx`: write (or --check) the kcache passport stamp in an
// ONNX model's metadata_props (docs/plans.md, "Passports in ONNX models").
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/onnx_module.hpp"
#include "kcache/passport.hpp"

namespace kcache::cli {

namespace {

struct StampArgs {
  std::string file;
  std::string key;
  std::vector<std::string> labels;
  bool check = false;
};

// The key to stamp: --key, else the passport beside the file, else a key over the model's content.
Result<Key> stamp_key(const OnnxModule& module, const StampArgs& args) {
  if (!args.key.empty()) {
    return Key::parse(args.key);
  }
  std::ifstream pass(plan_passport_path(args.file), std::ios::binary);
  if (pass) {
    std::ostringstream s;
    s << pass.rdbuf();
    auto passport = Passport::from_json(s.str());
    if (!passport) {
      return make_error(ErrorCode::corrupt, "the passport beside " + args.file + " is damaged: " + passport.error().message +
                                                "; pass --key explicitly");
    }
    return passport->key;
  }
  std::ifstream in(args.file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  auto content = module.content_sha256(s.str());
  if (!content) {
    return tl::unexpected(content.error());
  }
  KeyBuilder kb("onnx");
  kb.add("content", *content);
  return kb.key();
}

int run_stamp(const StampArgs& args) {
  std::optional<Key> expected;
  if (!args.key.empty()) {
    auto k = Key::parse(args.key);
    if (!k) {
      std::fprintf(stderr, "kcache: --key: %s\n", k.error().message.c_str());
      return k_exit_usage;
    }
    expected = *k;
  }
  auto module = OnnxModule::get();
  if (!module) {
    std::fprintf(stderr, "kcache: %s\n", module.error().message.c_str());
    return k_exit_error;
  }
  if (args.check) {
    auto stamp = (*module)->verify(args.file, expected);
    if (!stamp) {
      std::fprintf(stderr, "kcache: %s\n", stamp.error().message.c_str());
      return stamp.error().code == ErrorCode::corrupt ? k_exit_corrupt : k_exit_error;
    }
    std::printf("%s: stamp ok (key %s)\n", args.file.c_str(), stamp->key.c_str());
    return k_exit_ok;
  }
  auto key = stamp_key(**module, args);
  if (!key) {
    std::fprintf(stderr, "kcache: %s\n", key.error().message.c_str());
    return k_exit_error;
  }
  std::map<std::string, std::string> labels;
  for (const auto& l : args.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "kcache: --label wants NAME=VALUE, got '%s'\n", l.c_str());
      return k_exit_usage;
    }
    labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  auto done = (*module)->stamp(args.file, *key, labels);
  if (!done) {
    std::fprintf(stderr, "kcache: %s\n", done.error().message.c_str());
    return done.error().code == ErrorCode::corrupt ? k_exit_corrupt : k_exit_error;
  }
  std::printf("%s: %s (key %s)\n", args.file.c_str(), *done == StampChange::stamped ? "stamped" : "already stamped, unchanged",
              key->hex().c_str());
  return k_exit_ok;
}

void register_stamp(CLI::App& app, Context& /*ctx*/, std::function<int()>& run) {
  auto args = std::make_shared<StampArgs>();
  CLI::App* cmd = app.add_subcommand("stamp", "Stamp a kcache passport into an ONNX model's metadata (or --check it)");
  cmd->add_option("FILE", args->file, "The ONNX model")->required();
  cmd->add_option("--key", args->key, "Key to stamp (default: from FILE.pass beside it, else a key over the model content)")
      ->type_name("HEX64");
  cmd->add_option("--label", args->labels, "Label to stamp as kcache.label.NAME (repeatable)")->type_name("NAME=VALUE");
  cmd->add_flag("--check", args->check, "Verify the stamp (and --key when given) instead of writing; exit 4 when it fails");
  cmd->callback([&run, args] { run = [args] { return run_stamp(*args); }; });
}

}  // namespace

KCACHE_COMMAND(stamp, register_stamp);

}  // namespace kcache::cli
