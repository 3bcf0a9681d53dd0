// kcache/builder.hpp: what turns a plan entry into an artifact file.
//
// A Builder is a small interface so a program can register its own next to
// the shipped ones:
//   - "command": any external tool, argv with placeholders, run with a timeout;
//   - "nvcc": the CUDA toolkit's nvcc, kernel sets to cubin/fatbin/ptx for the host SM;
//   - "nvrtc": one CUDA C++ source through kcache's JIT path (NVRTC via dlopen)
//     to cubin/ptx/ltoir for the host SM.
//
// A builder writes only `BuildRequest::output`, a path inside a staging
// directory kcache owns; kcache checks the file, hashes it and publishes it.
//
// Thread-safety: build(), validate() and add_key_fields() may be called from
// several threads at once on one builder (for `-j N`); a builder that cannot
// allow that returns Concurrency::serial.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"
#include "kcache/host_fingerprint.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"
#include "kcache/plan.hpp"

namespace kcache {

struct BuildRequest {
  const PlanEntry& entry;
  const HostFingerprint& host;
  std::string kind;                 // resolved: the entry's kind or the builder's default
  std::filesystem::path output;     // the only file the builder may write (in `work_dir`)
  std::filesystem::path work_dir;   // a private scratch directory, removed afterwards
  std::filesystem::path log_file;   // where tool output goes (in `work_dir`)
};

struct BuildOutput {
  Producer producer;  // the tool that made it, e.g. {"nvcc", "13.0"}
  std::string log;    // the tool's output, kept in the passport
};

enum class Concurrency { parallel, serial };

class Builder {
 public:
  virtual ~Builder() = default;

  // The name plan files use in `builder = "..."`.
  virtual std::string_view name() const noexcept = 0;

  // The artifact kind when the entry names none ("engine", "cubin").
  virtual std::string default_kind() const = 0;

  // Checks builder-specific parts of `entry` before anything runs (a command
  // is present, placeholders are known, inputs fit). Returns
  // invalid_argument whose message says what is wrong and how to fix it.
  virtual Result<void> validate(const PlanEntry& entry) const = 0;

  // Adds what the builder alone knows changes the output (its tool version)
  // to `key`. Generic entry fields (inputs by content, options, host) are
  // added by the orchestrator.
  virtual void add_key_fields(const PlanEntry& entry, const HostFingerprint& host, KeyBuilder& key) const = 0;

  // Builds into `request.output`. On success the file must exist and be
  // non-empty (the orchestrator checks). Returns compile_failed with the log,
  // timeout, not_found (tool missing) or io on failure.
  virtual Result<BuildOutput> build(const BuildRequest& request) const = 0;

  virtual Concurrency concurrency() const noexcept { return Concurrency::parallel; }
};

// The builders a plan may name. Not thread-safe while being modified; const
// use is thread-safe.
class BuilderRegistry {
 public:
  BuilderRegistry() = default;

  // A registry holding the shipped builders: "command", "nvcc" and "nvrtc".
  static BuilderRegistry with_shipped_builders();

  // Adds `builder`, replacing one of the same name.
  void add(std::unique_ptr<Builder> builder);

  // Returns the builder called `name`, or nullptr. The registry keeps ownership.
  const Builder* find(std::string_view name) const;

  // The registered names, sorted (for PlanLoadOptions::builders).
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<Builder>, std::less<>> m_builders;
};

// The shipped builders, for programs that assemble their own registry.
std::unique_ptr<Builder> make_command_builder();
std::unique_ptr<Builder> make_nvcc_builder(std::filesystem::path cuda_home = {});
std::unique_ptr<Builder> make_nvrtc_builder();

// Expands placeholders in one argument of a command: {input} (first input),
// {input0}..{inputN}, {output}, {precision}, {sm}, {jp}, {trt}, {cuda},
// {name}, {kind}, {workdir}, {shapes} ("in:1x3x224x224,mask:1x224"), and
// {opt.KEY} for each option; "{{" and "}}" are literal braces. Returns
// invalid_argument naming an unknown placeholder.
Result<std::string> expand_placeholders(std::string_view arg, const BuildRequest& request);

}  // namespace kcache
