// `kcache plan build|check|show PLAN`: build or reuse the engines a plan lists
// (docs/plans.md).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/host_spec.hpp"
#include "cli/onnx_module.hpp"
#include "cli/output.hpp"
#include "cli/output_file.hpp"
#include "kcache/orchestrator.hpp"
#include "plan/process.hpp"

namespace kcache::cli {

namespace {

struct PlanArgs {
  std::string plan;
  std::string host;
  unsigned jobs = 1;
  bool keep_going = false;
  bool json = false;
  std::string log_json;
  bool no_cache = false;
};

// The host to build for: what was probed, with the fields --host names put
// over it (`--host sm=90` keeps the detected CUDA, driver, TensorRT and
// JetPack versions; `cuda=na` says "none" explicitly). Says on stderr which
// host is used and where each part came from.
Result<HostFingerprint> host_for(const PlanArgs& args) {
  HostFingerprint host = probe_host();
  std::string given_fields;
  if (!args.host.empty()) {
    auto given = overlay_host(host, args.host);
    if (!given) {
      return tl::unexpected(given.error());
    }
    given_fields = std::move(*given);
  }
  std::string line = "host " + host.to_string() +
                     (given_fields.empty() ? " (probed)" : " (" + given_fields + " from --host, the rest probed)");
  if (host.sm == "na") {
    line += "; no GPU was found: give --host sm=XX to build for one";
  }
  std::fprintf(stderr, "kcache: %s\n", line.c_str());
  return host;
}

Result<Plan> load_plan(const PlanArgs& args, const BuilderRegistry& registry) {
  // A directory or a FIFO is named as such, not parsed as an empty plan.
  if (auto ok = check_input_file(args.plan); !ok) {
    Error e = ok.error();
    e.message = "the plan " + e.message;
    return tl::unexpected(std::move(e));
  }
  PlanLoadOptions options;
  options.builders = registry.names();
  return Plan::load(args.plan, options);
}

// Prints why the plan cannot be used, with the documented prefix and a hint;
// returns the exit code (1).
int print_plan_error(const Error& error) {
  if (error.code != ErrorCode::invalid_argument) {
    report(error, "give the path of a plan file (docs/plan-file.md)");
    return k_exit_error;
  }
  std::fputs(("kcache: error: invalid_argument: the plan is not valid:\n" +
              (error.log.empty() ? error.message + "\n" : error.log) +
              "kcache: hint: fix each line above (the format: docs/plan-file.md); `kcache plan check` checks again\n")
                 .c_str(),
             stderr);
  return k_exit_error;
}

int report_host_error(const Error& error) {
  report(error, "write --host field=value,... with fields sm, driver, cuda, trt, jp (e.g. --host sm=87,jp=6.2)");
  return k_exit_usage;
}

int run_build(const PlanArgs& args, const Context& ctx) {
  const BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
  auto plan = load_plan(args, registry);
  if (!plan) {
    return print_plan_error(plan.error());
  }
  auto host = host_for(args);
  if (!host) {
    return report_host_error(host.error());
  }
  // The content cache is optional: a broken cache never breaks a build.
  std::unique_ptr<Store> cache;
  if (!args.no_cache) {
    auto config = ctx.config();
    auto store = config ? open_configured_store(*config) : Result<std::unique_ptr<Store>>(tl::unexpected(config.error()));
    if (store) {
      cache = std::move(*store);
    } else {
      std::fprintf(stderr, "kcache: warning: content cache unavailable (%s); building without it\n",
                   store.error().message.c_str());
    }
  }
  std::unique_ptr<std::ofstream> log_file;
  std::ostream* log = nullptr;
  if (args.log_json == "-") {
    log = &std::cout;
  } else if (!args.log_json.empty()) {
    log_file = std::make_unique<std::ofstream>(args.log_json, std::ios::app);
    if (!*log_file) {
      return cli::report(make_errno_error(errno, "cannot open " + args.log_json + " for the event log").value(),
                         "name a file in a writable directory, or - for stdout");
    }
    log = log_file.get();
  }
  // A Ctrl-C or SIGTERM also ends the builder tools (they run in their own process groups).
  plan::kill_children_on_termination_signals();
  const bool progress = !args.json && ::isatty(STDERR_FILENO) != 0;
  OrchestratorOptions options;
  options.builders = &registry;
  options.cache = cache.get();
  options.jobs = args.jobs;
  options.keep_going = args.keep_going ? KeepGoing::yes : KeepGoing::no;
  options.finishers["onnx"] = OnnxModule::stamp_finisher();
  if (log != nullptr) {
    options.on_event = [log](std::string_view line) {
      *log << line << '\n';
      log->flush();
    };
  }
  if (progress) {
    options.on_progress = [](const EntryResult& r, std::size_t done, std::size_t total) {
      const std::size_t width = 24;
      const std::size_t filled = total == 0 ? width : done * width / total;
      std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %s %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total, r.name.c_str(),
                   std::string(to_string(r.outcome)).c_str());
      std::fflush(stderr);
    };
  }
  Orchestrator orchestrator(std::move(options));
  auto report = orchestrator.run(*plan, *host);
  if (progress) {
    std::fputs("\r\033[K", stderr);
  }
  if (!report) {
    if (report.error().code == ErrorCode::invalid_argument) {
      return print_plan_error(report.error());
    }
    cli::report(report.error());
    return k_exit_error;
  }
  if (args.json) {
    std::fputs(report->to_json().c_str(), stdout);
  } else {
    std::fputs(report->to_table().c_str(), stdout);
  }
  for (const auto& e : report->entries) {
    if (e.outcome == Outcome::failed) {
      std::fprintf(stderr, "kcache: entry '%s' failed: %s\n", e.name.c_str(), e.error.c_str());
      if (!e.log.empty() && !args.json) {
        std::fprintf(stderr, "--- log (last lines) ---\n%s\n", e.log.substr(e.log.size() > 2000 ? e.log.size() - 2000 : 0).c_str());
      }
    }
  }
  return report->ok() ? k_exit_ok : k_exit_build;
}

int run_check(const PlanArgs& args, bool show) {
  const BuilderRegistry registry = BuilderRegistry::with_shipped_builders();
  auto plan = load_plan(args, registry);
  if (!plan) {
    return print_plan_error(plan.error());
  }
  OrchestratorOptions options;
  options.builders = &registry;
  const Orchestrator orchestrator(std::move(options));
  if (auto ok = orchestrator.validate(*plan); !ok) {
    return print_plan_error(ok.error());
  }
  if (!show) {
    std::printf("%s: ok, %zu entries\n", args.plan.c_str(), plan->entries.size());
    return k_exit_ok;
  }
  auto host = host_for(args);
  if (!host) {
    return report_host_error(host.error());
  }
  std::printf("plan:   %s\nhost:   %s\noutput: %s\n", plan->file.c_str(), host->to_string().c_str(),
              plan->output_dir.c_str());
  for (const auto& e : plan->entries) {
    auto name = orchestrator.file_name(e, *host);
    std::printf("  %-24s %-8s %-6s %s\n", e.name.c_str(), e.builder.c_str(), e.precision.c_str(),
                name ? name->c_str() : ("(" + name.error().message + ")").c_str());
  }
  return k_exit_ok;
}

void register_plan(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand("plan", "Build or reuse the engines and binaries a plan file lists (docs/plans.md)");
  plan->require_subcommand(1);

  CLI::App* build = plan->add_subcommand("build", "Build what is missing or stale for this host, reuse what is valid");
  build->add_option("PLAN", args->plan, "The plan file (TOML, docs/plan-file.md)")->required();
  build->add_option("--host", args->host, "Host fingerprint over the probed one, e.g. sm=87,jp=6.2,trt=10.3 (omitted parts: as probed)");
  build->add_option("-j,--jobs", args->jobs, "Entries built at once")->check(CLI::Range(1u, 256u))->default_val(1u);
  build->add_flag("--keep-going", args->keep_going, "Build the other entries after a failure");
  build->add_flag("--json", args->json, "Print the full report as JSON instead of a table");
  build->add_option("--log-json", args->log_json, "Append JSON-lines events to FILE ('-' for stdout)")->type_name("FILE|-");
  build->add_flag("--no-cache", args->no_cache, "Do not fetch from or put into the content cache");
  build->callback([&run, &ctx, args] {
    run = [&ctx, args] {
      args->json = args->json || ctx.json;  // `kcache --json plan build ...` too
      return run_build(*args, ctx);
    };
  });

  CLI::App* check = plan->add_subcommand("check", "Validate a plan file (and each entry's builder settings); build nothing");
  check->add_option("PLAN", args->plan, "The plan file")->required();
  check->callback([&run, args] { run = [args] { return run_check(*args, false); }; });

  CLI::App* show = plan->add_subcommand("show", "List each entry and the file name it gets on this host");
  show->add_option("PLAN", args->plan, "The plan file")->required();
  show->add_option("--host", args->host, "Host fingerprint over the probed one, e.g. sm=87,jp=6.2,trt=10.3 (omitted parts: as probed)");
  show->callback([&run, args] { run = [args] { return run_check(*args, true); }; });
}

}  // namespace

KCACHE_COMMAND(plan, register_plan);

}  // namespace kcache::cli
