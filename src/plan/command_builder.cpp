// The "command" builder: any external tool, argv with placeholders, a timeout.
#include <chrono>

#include "kcache/builder.hpp"
#include "plan/process.hpp"

namespace kcache {

namespace {

class CommandBuilder final : public Builder {
 public:
  std::string_view name() const noexcept override { return "command"; }
  std::string default_kind() const override { return "engine"; }

  Result<void> validate(const PlanEntry& entry) const override {
    if (entry.command.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "entry '" + entry.name +
                            "' uses the command builder but has no command; add command = [\"tool\", \"{input}\", "
                            "\"-o\", \"{output}\"]");
    }
    // Expand once against placeholder values to catch unknown placeholders now.
    const HostFingerprint host;
    const BuildRequest probe{entry, host, "engine", "/staging/output", "/staging", "/staging/log"};
    bool names_output = false;
    for (const auto& arg : entry.command) {
      auto expanded = expand_placeholders(arg, probe);
      if (!expanded) {
        return make_error(ErrorCode::invalid_argument, "entry '" + entry.name + "': " + expanded.error().message);
      }
      names_output = names_output || arg.find("{output}") != std::string::npos;
    }
    if (!names_output) {
      return make_error(ErrorCode::invalid_argument,
                        "the command of entry '" + entry.name +
                            "' never mentions {output}; the tool must write its result to {output}");
    }
    return {};
  }

  void add_key_fields(const PlanEntry& entry, const HostFingerprint& /*host*/, KeyBuilder& key) const override {
    // The command template (not its expansion: staging paths change every run).
    for (const auto& arg : entry.command) {
      key.add("command.arg", arg);
    }
  }

  Result<BuildOutput> build(const BuildRequest& request) const override {
    std::vector<std::string> argv;
    for (const auto& arg : request.entry.command) {
      auto expanded = expand_placeholders(arg, request);
      if (!expanded) {
        return tl::unexpected(expanded.error());
      }
      argv.push_back(std::move(*expanded));
    }
    auto ran = plan::run_process(argv, request.work_dir, request.log_file,
                                 std::chrono::duration_cast<std::chrono::milliseconds>(request.entry.timeout));
    if (!ran) {
      return tl::unexpected(ran.error());
    }
    std::string log = plan::read_log_tail(request.log_file, std::size_t{64} << 10);
    if (!ran->ok()) {
      return make_error(ran->timed_out ? ErrorCode::timeout : ErrorCode::compile_failed,
                        "'" + argv.front() + "' " + ran->describe(request.entry.timeout), std::move(log));
    }
    return BuildOutput{Producer{argv.front(), ""}, std::move(log)};
  }
};

}  // namespace

std::unique_ptr<Builder> make_command_builder() { return std::make_unique<CommandBuilder>(); }

}  // namespace kcache
