// kcache/plan.hpp: plan files, the list of engines and binaries a project needs.
//
// A plan is a TOML file (format version 1, docs/plan-file.md has the full
// reference and an example):
//
//   version    = 1                      required, must be 1
//   output_dir = "engines"              optional, relative to the plan file's directory
//   hosts      = ["sm=87,jp=6.2", "sm=90"]   optional: host profiles (host_fingerprint.hpp
//                                       syntax) the plan is built for; `kcache bundle create
//                                       --plan` takes every entry for each of them
//   [defaults]                          optional: builder, kind, precision, timeout_s, labels
//   [[entry]]                           zero or more
//   name       = "dinov2_vpr"           required; a model name (engine_name.hpp grammar), unique
//   builder    = "command"              required here or in [defaults]: a registered builder
//   kind       = "engine"               optional; the builder's default kind otherwise
//   precision  = "fp16"                 one of fp32 tf32 fp16 bf16 fp8 int8 int4 best (default fp32)
//   inputs     = ["model.onnx"]         files, relative to the plan file; each must exist
//   command    = ["trtexec", "--onnx={input}", "--saveEngine={output}", "--{precision}"]
//   flags      = ["-O3"]                extra compiler flags (nvcc, nvrtc)
//   shapes     = { input = [1, 3, 224, 224] }   every dimension a positive integer
//   options    = { workspace = 1024 }   builder options: strings, integers or booleans
//   labels     = { team = "vision" }    free-form strings, copied into passports
//   timeout_s  = 600                    positive integer (default 3600)
//
// Everything is checked before anything runs. Each problem names the file,
// the line and the fix: unknown keys, wrong types, duplicate names, names the
// file-name schema cannot hold, non-positive shape dimensions, missing input
// files, unknown builders or precisions.
//
// Thread-safety: a Plan is a value.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/error.hpp"

namespace kcache {

inline constexpr int k_plan_format_version = 1;

struct PlanEntry {
  std::string name;
  std::string builder;
  std::string kind;  // empty: the builder's default
  std::string precision = "fp32";
  std::vector<std::filesystem::path> inputs;  // absolute paths
  std::vector<std::string> command;
  std::vector<std::string> flags;
  std::map<std::string, std::vector<std::int64_t>> shapes;
  std::map<std::string, std::string> options;
  std::map<std::string, std::string> labels;
  std::chrono::seconds timeout{3600};
  int line = 0;  // where the entry starts in the plan file
};

// One validation finding: "plan.toml:12: unknown key 'precison' in entry 'x'; did you mean 'precision'?"
struct PlanProblem {
  std::string file;
  int line = 0;
  std::string message;
  std::string fix;

  // "<file>:<line>: <message>; fix: <fix>"
  std::string to_string() const;
};

enum class CheckInputs { yes, no };

struct PlanLoadOptions {
  // The builders a plan may name (BuilderRegistry::names() of the registry that will run it).
  std::vector<std::string> builders{"command", "nvcc", "nvrtc"};
  CheckInputs check_inputs = CheckInputs::yes;
};

struct Plan {
  std::filesystem::path file;        // the plan file (absolute), or a label for parsed text
  std::filesystem::path output_dir;  // absolute
  std::vector<std::string> hosts;    // host profiles (HostFingerprint::parse syntax), in file order
  std::vector<PlanEntry> entries;

  // Reads and validates the plan at `path`. On success every entry is valid.
  // On failure returns invalid_argument (not_found when the file is missing)
  // whose message is the first problem and whose `log` lists every problem,
  // one PlanProblem::to_string() per line.
  static Result<Plan> load(const std::filesystem::path& path, const PlanLoadOptions& options = {});

  // As load(), for text already in memory; relative paths resolve against
  // `base_dir` and problems name `file_label`.
  static Result<Plan> parse(std::string_view text, const std::filesystem::path& base_dir, std::string_view file_label,
                            const PlanLoadOptions& options = {});
};

// The precisions a plan may name.
const std::vector<std::string>& plan_precisions();

}  // namespace kcache
