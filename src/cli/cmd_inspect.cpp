// `kcache inspect FILE`: what kcache knows about a plan artifact: its name
// parts, sidecar, passport beside it, and for ONNX models the stamp.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/onnx_module.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "util/input_file.hpp"
#include "kcache/engine_name.hpp"
#include "kcache/passport.hpp"
#include "plan/sidecar.hpp"

namespace kcache::cli {

namespace {

struct InspectArgs {
  std::string file;
  bool json = false;
};

int run_inspect(const InspectArgs& args) {
  namespace fs = std::filesystem;
  // Through a symlink, the artifact is the file it names, and its sidecar and
  // passport are those beside that file (input files follow symlinks, docs/cli.md).
  std::error_code ec;
  fs::path file(args.file);
  if (fs::is_symlink(file, ec)) {
    if (auto target = fs::canonical(file, ec); !ec) {
      file = std::move(target);  // a dangling link stays as given: its read names it
    }
  }
  nlohmann::ordered_json doc;
  doc["file"] = args.file;
  bool bad = false;
  // A missing file, a directory or a FIFO (which would block the reader) is refused as what it is: exit 1.
  auto digest = check_input_file(args.file).and_then([&] { return plan::hash_file(file); });
  if (!digest) {
    report(digest.error(), "give the path of a plan artifact (an engine, a fatbin, an ONNX model)");
    return k_exit_error;
  }
  doc["size"] = digest->size;
  doc["sha256"] = digest->sha256;
  if (auto name = EngineName::parse(file.filename().string())) {
    doc["name"] = {{"model", name->model}, {"sm", name->sm}, {"jp", name->jp}, {"trt", name->trt},
                   {"precision", name->precision}, {"ext", name->ext}};
  }
  const plan::SidecarCheck check = plan::check_sidecar(file);
  doc["sidecar"] = std::string(plan::to_string(check.state));
  bad = bad || check.state == plan::SidecarState::mismatch || check.state == plan::SidecarState::bad_sidecar;
  std::optional<Key> key;
  // Read as every file a user names is (util/input_file.hpp): a FIFO is named, never waited on.
  auto pass = util::read_input_file(plan_passport_path(file), "the passport beside " + args.file, k_passport_max_bytes);
  if (!pass && pass.error().code != ErrorCode::not_found) {
    doc["passport"] = "unreadable: " + pass.error().message;
    bad = true;
  }
  if (pass) {
    if (auto passport = Passport::from_json(*pass)) {
      key = passport->key;
      doc["passport"] = nlohmann::ordered_json::parse(passport->to_json());
      if (passport->payload_sha256 != digest->sha256) {
        doc["passport_matches"] = false;
        bad = true;
      } else {
        doc["passport_matches"] = true;
      }
    } else {
      doc["passport"] = "damaged: " + passport.error().message;
      bad = true;
    }
  }
  if (file.extension() == ".onnx") {
    auto module = OnnxModule::get();
    auto stamp = module ? (*module)->read(file) : Result<std::optional<OnnxStamp>>(tl::unexpected(module.error()));
    if (!stamp) {
      doc["onnx_stamp"] = "unreadable: " + stamp.error().message;
      bad = true;
    } else if (!stamp->has_value()) {
      doc["onnx_stamp"] = "missing";
      bad = true;
    } else {
      const OnnxStamp& st = **stamp;
      doc["onnx_stamp"] = {{"compiled", st.compiled}, {"key", st.key}, {"content", st.content_sha256},
                           {"producer", st.producer}, {"labels", st.labels}};
      auto verified = (*module)->verify(file, key);
      doc["onnx_stamp_ok"] = verified.has_value();
      if (!verified) {
        doc["onnx_stamp_error"] = verified.error().message;
        bad = true;
      }
    }
  }
  if (args.json) {
    std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      const std::string value = it.value().is_string() ? it.value().get<std::string>() : it.value().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      std::printf("%-18s %s\n", (it.key() + ":").c_str(), value.c_str());
    }
  }
  return bad ? k_exit_corrupt : k_exit_ok;
}

void register_inspect(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show and check a plan artifact: name parts, sidecar, passport, ONNX stamp");
  cmd->add_option("FILE", args->file, "The artifact file")->required();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([&run, &ctx, args] {
    run = [&ctx, args] {
      args->json = args->json || ctx.json;
      return run_inspect(*args);
    };
  });
}

}  // namespace

KCACHE_COMMAND(inspect, register_inspect);

}  // namespace kcache::cli
