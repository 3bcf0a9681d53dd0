// kcache link: PTX / LTO-IR / cubin / fatbin inputs to a cubin with nvJitLink, through the cache.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/store_warnings.hpp"
#include "cli/compile_cli_support.hpp"
#include "kcache/linker.hpp"

namespace kcache::cli {

namespace {

struct LinkArgs {
  std::vector<std::string> files;
  std::string arch;
  bool lto = false;
  std::vector<std::string> extra_options;
  std::string output = "a.cubin";
  bool no_cache = false;
  bool json = false;
};

std::string kind_of(const std::string& file) {
  const auto ext = std::filesystem::path(file).extension().string();
  if (ext == ".ptx") return "ptx";
  if (ext == ".ltoir" || ext == ".lto") return "ltoir";
  if (ext == ".cubin") return "cubin";
  if (ext == ".fatbin") return "fatbin";
  if (ext == ".o") return "object";
  if (ext == ".a") return "library";
  return "";
}

int run_link(const Context& ctx, const LinkArgs& args) {
  auto env = open_compile_environment(ctx, args.no_cache, BadSettings::compile_without_cache, "linking",
                                      OneOutput::yes);
  if (!env) {
    return report_error(env.error());
  }
  Linker linker;
  if (!args.arch.empty()) {
    linker.add_option("-arch=" + args.arch);
  }
  if (args.lto) {
    linker.add_option("-lto");
  }
  for (const auto& o : args.extra_options) {
    linker.add_option(o);
  }
  for (const auto& f : args.files) {
    const auto kind = kind_of(f);
    if (kind.empty()) {
      std::fprintf(stderr, "kcache: error: cannot tell the kind of %s from its extension "
                           "(.ptx .ltoir .cubin .fatbin .o .a)\n", f.c_str());
      return k_exit_usage;
    }
    int read_status = k_exit_error;
    auto bytes = read_input_file(f, read_status);
    if (!bytes) {
      return read_status;
    }
    linker.add_input(std::filesystem::path(f).filename().string(), kind, std::move(*bytes));
  }
  CompileInfo info;
  TieredStore::start_lookup_trace();
  auto cubin = linker.link(env->store.get(), &info);
  const auto lookups = TieredStore::take_lookup_trace();
  if (!cubin) {
    return report_error(cubin.error());
  }
  if (!info.store_warning.empty()) {
    store_warnings::warn(store_warnings::Source::layer, info.store_warning);
  }
  if (auto w = write_atomically(args.output, cubin->payload); !w) {
    return report_output_error(w.error());
  }
  if (args.json) {
    auto j = info_json(info);
    add_lookups_json(j, lookups, info.hit);
    j["output"] = args.output;
    j["passport"] = nlohmann::json::parse(cubin->passport.to_json());
    std::printf("%s\n", j.dump(2).c_str());
  }
  return k_exit_ok;
}

void register_link(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<LinkArgs>();
  auto* cmd = app.add_subcommand("link", "Link PTX / LTO-IR / cubin / fatbin to a cubin with nvJitLink, through the cache");
  cmd->add_option("files", args->files, "Inputs; the kind comes from the extension")->required();
  cmd->add_option("--arch,-a", args->arch, "GPU architecture (sm_XX)")->required();
  cmd->add_flag("--lto", args->lto, "Link-time optimisation (LTO-IR inputs)");
  cmd->add_option("-X,--option", args->extra_options, "Pass an nvJitLink option through (\"-O3\")");
  cmd->add_option("-o,--output", args->output, "Output cubin (`-` is stdout). A regular file is replaced atomically, "
                  "a device, FIFO or symlink target is written in place")->capture_default_str();
  cmd->add_flag("--no-cache", args->no_cache, "Link without looking up or storing");
  cmd->add_flag("--json", args->json, "Print what happened and the passport as JSON");
  cmd->callback([&ctx, &run, args] { run = [&ctx, args] { return run_link(ctx, *args); }; });
}

}  // namespace

KCACHE_COMMAND(link, register_link);

}  // namespace kcache::cli
