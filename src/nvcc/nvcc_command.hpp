// nvcc/nvcc_command.hpp: one nvcc command line, read the way nvcc reads it,
// and whether kcache can cache it (private).
//
// parse_command() takes the arguments after the nvcc path and what nvcc takes
// from the environment (NVCC_PREPEND_FLAGS before them, NVCC_APPEND_FLAGS
// after, options files read in place) and returns:
// - why the command is not cacheable, with a reason code for the counters,
//   when it is anything but the compile of one source to one output: a link,
//   several inputs, preprocessing, dependencies only, an unknown option,
//   files kcache does not know of (`-keep`, `-time`, host options such as
//   `-Xcompiler -save-temps`), ...; such a command is run by nvcc unchanged;
// - otherwise the compile's parts: the input, the output and its kind, the
//   dependency-file options, the host compiler's spelling, the search path,
//   and the options in one canonical spelling per option (`--name=value`, in
//   the order given), which go into the key.
//
// Thread-safety: a value; parse_command() is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::nvcc {

// Why a command is not cacheable (a counter per reason, docs/nvcc.md).
enum class Uncacheable : unsigned {
  none = 0,
  link,              // no compile phase, or an explicit link / device link / library
  no_input,          // no input file
  several_inputs,    // more than one input file
  input_kind,        // an input nvcc does not compile from source (.o, .a, .cubin ...)
  preprocess,        // -E
  dependencies_only, // -M / -MM without a compile
  unknown_option,    // an option nvcc 13 does not list
  side_output,       // files beside the output kcache does not know of (-keep, -time ...)
  host_option,       // a host compiler option that writes or reads files kcache does not know of
  no_compile,        // --help, --version, --dryrun, --list-gpu-arch ...
  options_file,      // an options file that cannot be read, or options files nested too deep
  environment,       // an environment variable nvcc's host compiler reads makes it write files
  other,             // anything else (verbose output, another libdevice ...)
  count_
};
inline constexpr unsigned k_uncacheable_reasons = static_cast<unsigned>(Uncacheable::count_);

// The counter name of `reason`: "link", "several_inputs" ...
std::string_view to_string(Uncacheable reason) noexcept;

// What a cacheable compile produces.
enum class OutputKind { object, ptx, cubin, fatbin, optixir, ltoir, cuda_cpp };

// The passport kind of an output: "object", "ptx", "cubin", "fatbin", "optixir", "ltoir", "cuda-cpp".
std::string_view kind_name(OutputKind kind) noexcept;

// Which dependency file nvcc writes beside the compile.
enum class DepMode {
  none,       // no dependency file
  full,       // -MD: every header
  nonsystem,  // -MMD: without system headers
};

struct DependencyOutput {
  DepMode mode = DepMode::none;
  std::string file;                  // -MF as given, else the path nvcc picks (the output with .d)
  std::vector<std::string> targets;  // -MT values, in order (empty: nvcc names the output)
  bool phony = false;                // -MP
  bool explicit_file = false;        // true when -MF was given
};

// What nvcc reads from the environment. Values are those of the process
// environment; `present` says whether each is set.
struct NvccEnvironment {
  std::string prepend_flags;  // NVCC_PREPEND_FLAGS
  std::string append_flags;   // NVCC_APPEND_FLAGS
  std::string ccbin;          // NVCC_CCBIN
  bool has_prepend = false;
  bool has_append = false;
  bool has_ccbin = false;

  // From the process environment.
  static NvccEnvironment from_process();
};

struct NvccCommand {
  // The arguments as given (after the nvcc path), which a miss runs nvcc with.
  std::vector<std::string> args;

  Uncacheable reason = Uncacheable::none;
  std::string reason_text;  // the option or input that decided it, for --explain and logs

  std::string input;       // the source, as given
  std::string output;      // -o as given, else the name nvcc picks
  bool explicit_output = false;
  OutputKind output_kind = OutputKind::object;
  DependencyOutput deps;
  std::string ccbin;       // -ccbin as given, else NVCC_CCBIN, else empty (nvcc's default)
  bool ccbin_from_env = false;

  // Canonical options (`--long-name=value` or `--long-name`), in order, with
  // the output, dependency-file, -ccbin and options-file options left out.
  std::vector<std::string> key_options;
  // SHA-256 hex of each options file read, in the order read (its options are in key_options too).
  std::vector<std::string> options_file_digests;

  // Include search path, in nvcc's order: -I values, then -isystem values (as given).
  std::vector<std::string> include_dirs;
  std::vector<std::string> system_dirs;
  std::vector<std::string> pre_includes;  // -include values
  // Host compiler options (-Xcompiler values split at commas), in order.
  std::vector<std::string> host_options;

  // True when the output names paths (-g, -G, -lineinfo, -src-in-ptx, a
  // host -g*): the working directory goes into the key.
  bool output_names_paths = false;

  // Indices in `args` of the output, phase and dependency-file options
  // (values included): without them, and with `-M -MF FILE`, the command
  // lists every header without compiling (how kcache learns the headers of
  // an -MMD compile, whose own file leaves out the system ones).
  std::vector<std::size_t> listing_drops;

  bool cacheable() const noexcept { return reason == Uncacheable::none; }
};

// Reads `args` as nvcc would, with `env`'s flags around them. Options files
// named relative are read relative to the working directory. Never fails: a
// command kcache cannot read is returned not cacheable, with its reason.
NvccCommand parse_command(const std::vector<std::string>& args, const NvccEnvironment& env);

// Splits an options file's text into arguments: whitespace separates, double
// and single quotes group (and are removed), a backslash escapes the next
// character.
std::vector<std::string> split_options_file(std::string_view text);

// Splits NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS into arguments: whitespace
// separates, except inside double quotes, which stay in the argument (nvcc
// 13 passes `-DA="x y"` on as `A="x y"`).
std::vector<std::string> split_environment_flags(std::string_view text);

}  // namespace kcache::nvcc
