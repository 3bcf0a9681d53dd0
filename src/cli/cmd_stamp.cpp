// `kcache stamp FILE.onnx`: write (or --check) the kcache passport stamp in an
// ONNX model's metadata_props (docs/plans.md, "Passports in ONNX models").
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/onnx_module.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "util/input_file.hpp"
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
  // Read as every file a user names is (util/input_file.hpp): a FIFO is refused, never waited on.
  auto pass = util::read_input_file(plan_passport_path(args.file), "the passport beside " + args.file,
                                    k_passport_max_bytes);
  if (!pass && pass.error().code != ErrorCode::not_found) {
    return tl::unexpected(pass.error());
  }
  if (pass) {
    auto passport = Passport::from_json(*pass);
    if (!passport) {
      return make_error(ErrorCode::corrupt, "the passport beside " + args.file + " is damaged: " + passport.error().message +
                                                "; pass --key explicitly");
    }
    return passport->key;
  }
  // An ONNX model is a protobuf message: 2 GiB at most.
  auto model = util::read_input_file(args.file, "ONNX model", std::uint64_t{2} << 30);
  if (!model) {
    return tl::unexpected(model.error());
  }
  auto content = module.content_sha256(*model);
  if (!content) {
    return tl::unexpected(content.error());
  }
  KeyBuilder kb("onnx");
  kb.add("content", *content);
  return kb.key();
}

// Reports a failed stamp or check: corrupt (the model fails its check) is exit 4, anything else 1.
int report_stamp_error(const Error& error, const std::string& file) {
  report(error, error.code == ErrorCode::corrupt
                    ? "the model's stamp does not match it: stamp it again (`kcache stamp " + file + "`)"
                    : "give the path of an ONNX model (a regular .onnx file)");
  return error.code == ErrorCode::corrupt ? k_exit_corrupt : k_exit_error;
}

int run_stamp(const StampArgs& args) {
  std::optional<Key> expected;
  if (!args.key.empty()) {
    auto k = Key::parse(args.key);
    if (!k) {
      return report(Error{ErrorCode::invalid_argument, "--key: " + k.error().message, {}},
                    "a key is exactly 64 lowercase hex characters");
    }
    expected = *k;
  }
  // Named before the module is asked: a missing file, a directory or a FIFO
  // (which would block the reader) is refused as what it is.
  if (auto ok = check_input_file(args.file); !ok) {
    return report_stamp_error(ok.error(), args.file);
  }
  auto module = OnnxModule::get();
  if (!module) {
    report(module.error());
    return k_exit_error;
  }
  if (args.check) {
    auto stamp = (*module)->verify(args.file, expected);
    if (!stamp) {
      return report_stamp_error(stamp.error(), args.file);
    }
    std::printf("%s: stamp ok (key %s)\n", args.file.c_str(), stamp->key.c_str());
    return k_exit_ok;
  }
  auto key = stamp_key(**module, args);
  if (!key) {
    report(key.error(), "pass the key to stamp with --key");
    return k_exit_error;
  }
  std::map<std::string, std::string> labels;
  for (const auto& l : args.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      return report(Error{ErrorCode::invalid_argument, "--label wants NAME=VALUE, got '" + l + "'", {}},
                    "write --label NAME=VALUE");
    }
    labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  auto done = (*module)->stamp(args.file, *key, labels);
  if (!done) {
    return report_stamp_error(done.error(), args.file);
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
