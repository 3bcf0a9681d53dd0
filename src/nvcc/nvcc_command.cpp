#include "nvcc/nvcc_command.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "nvcc/nvcc_options.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace {

constexpr std::size_t k_max_options_file_bytes = std::size_t{1} << 20;
constexpr int k_max_options_file_depth = 8;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::vector<std::string> split_commas(std::string_view value) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = value.find(',', start);
    out.emplace_back(value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return out;
}

// Why a host compiler option makes the compile not cacheable: it writes files
// beside the output, reads files the key does not hold, or changes what the
// host compiler produces in ways the launcher does not follow. Empty: fine.
std::string_view host_option_problem(std::string_view o) {
  struct Prefix {
    std::string_view prefix;
    std::string_view why;
  };
  static constexpr Prefix k_bad[] = {
      {"-M", "writes a dependency file of its own"},
      {"-save-temps", "keeps intermediate files"},
      {"-fdump-", "writes dump files"},
      {"-fstack-usage", "writes .su files"},
      {"-fcallgraph-info", "writes .ci files"},
      {"-aux-info", "writes a prototypes file"},
      {"-ftest-coverage", "writes .gcno files"},
      {"--coverage", "writes .gcno files"},
      {"-fprofile-", "reads or names profile files"},
      {"-fauto-profile", "reads a profile"},
      {"-fplugin", "loads a plugin"},
      {"-specs", "reads a specs file"},
      {"-B", "picks other compiler programs"},
      {"-Wa,", "passes options to the assembler"},
      {"-Wp,", "passes options to the preprocessor"},
      {"-Xassembler", "passes options to the assembler"},
      {"-Xpreprocessor", "passes options to the preprocessor"},
      {"@", "reads a response file"},
      {"-E", "changes the compile phase"},
      {"-S", "changes the compile phase"},
      {"-o", "names another output"},
      {"-x", "changes the input language"},
      {"-fsyntax-only", "changes the compile phase"},
      {"-wrapper", "runs the compiler through a wrapper"},
  };
  for (const auto& b : k_bad) {
    if (starts_with(o, b.prefix)) {
      return b.why;
    }
  }
  return {};
}

std::string_view default_extension(OutputKind kind) {
  switch (kind) {
    case OutputKind::object:
      return ".o";
    case OutputKind::ptx:
      return ".ptx";
    case OutputKind::cubin:
      return ".cubin";
    case OutputKind::fatbin:
      return ".fatbin";
    case OutputKind::optixir:
      return ".optixir";
    case OutputKind::ltoir:
      return ".ltoir";
    case OutputKind::cuda_cpp:
      return ".cpp.ii";
  }
  return ".o";
}

class Parser {
 public:
  Parser(NvccCommand& cmd) : m_cmd(cmd) {}

  void fail(Uncacheable reason, std::string text) {
    if (m_cmd.reason == Uncacheable::none) {
      m_cmd.reason = reason;
      m_cmd.reason_text = std::move(text);
    }
  }

  // Appends `args`, with options files read in their place. With
  // `from_args`, each argument remembers its index in the command line.
  void expand(const std::vector<std::string>& args, int depth, bool from_args = false) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      std::optional<std::string> file;
      if (a == "-optf" || a == "--options-file") {
        if (i + 1 < args.size()) {
          file = args[++i];
        } else {
          fail(Uncacheable::options_file, a + " without a file");
          continue;
        }
      } else if (starts_with(a, "-optf=") || starts_with(a, "--options-file=")) {
        file = a.substr(a.find('=') + 1);
      }
      if (!file) {
        m_expanded.push_back(a);
        m_origin.push_back(from_args && depth == 0 ? i : k_not_an_argument);
        continue;
      }
      if (depth >= k_max_options_file_depth) {
        fail(Uncacheable::options_file, "options files nested more than 8 deep");
        continue;
      }
      // nvcc takes a comma-separated list of files.
      for (const auto& f : split_commas(*file)) {
        auto text = util::io::read_small_file(f, k_max_options_file_bytes);
        if (!text) {
          fail(Uncacheable::options_file, "the options file " + f + " cannot be read (or is over 1 MiB)");
          continue;
        }
        m_cmd.options_file_digests.push_back(util::sha256_hex(*text));
        expand(split_options_file(*text), depth + 1);
      }
    }
  }

  void parse() {
    std::optional<std::string> phase;
    bool forward_unknown = false;
    for (std::size_t i = 0; i < m_expanded.size(); ++i) {
      const std::size_t option_at = i;
      const std::string& tok = m_expanded[i];
      if (tok.empty() || tok[0] != '-' || tok == "-") {
        if (tok == "-" || tok.empty()) {
          fail(Uncacheable::input_kind, tok.empty() ? "an empty argument" : "input from standard input");
        }
        m_inputs.push_back(tok);
        continue;
      }
      const bool dd = starts_with(tok, "--");
      const std::string body = tok.substr(dd ? 2 : 1);
      const NvccOption* opt = find_option(body, dd);
      std::optional<std::string> value;
      if (opt == nullptr) {
        if (const auto eq = body.find('='); eq != std::string::npos) {
          opt = find_option(body.substr(0, eq), dd);
          if (opt != nullptr) {
            value = body.substr(eq + 1);
          }
        }
      }
      if (opt == nullptr && !dd && body.size() > 1 && takes_joined_value(body[0])) {
        opt = find_option(body.substr(0, 1), false);
        value = body.substr(1);
      }
      if (opt == nullptr) {
        if (forward_unknown) {
          add_host_option(tok);
          m_cmd.key_options.push_back("--forwarded=" + tok);
          continue;
        }
        fail(Uncacheable::unknown_option, "unknown option " + tok);
        continue;
      }
      if (opt->value == OptionValue::one && !value) {
        if (i + 1 >= m_expanded.size()) {
          fail(Uncacheable::other, tok + " without its value");
          continue;
        }
        value = m_expanded[++i];
      } else if (opt->value == OptionValue::none && value) {
        fail(Uncacheable::other, tok + " takes no value");
        continue;
      }
      const std::string canonical = "--" + std::string(opt->long_name) + (value ? "=" + *value : std::string());
      switch (opt->role) {
        case OptionRole::keyed:
          m_cmd.key_options.push_back(canonical);
          note_path_option(*opt, value);
          if (opt->long_name == "ptxas-options" && value) {
            // ptxas's own -g / -lineinfo write line tables naming the files.
            for (const auto& p : split_commas(*value)) {
              if (p == "-g" || p == "--device-debug" || p == "-lineinfo" || p == "--generate-line-info") {
                m_cmd.output_names_paths = true;
              }
            }
          }
          break;
        case OptionRole::phase:
          note_listing_drops(option_at, i);
          if (phase && *phase != opt->long_name) {
            fail(Uncacheable::other, "several compile phases (--" + *phase + ", --" + std::string(opt->long_name) + ")");
          }
          phase = std::string(opt->long_name);
          m_cmd.key_options.push_back(canonical);
          break;
        case OptionRole::output:
          note_listing_drops(option_at, i);
          m_cmd.output = *value;
          m_cmd.explicit_output = true;
          break;
        case OptionRole::dep_full:
          note_listing_drops(option_at, i);
          m_cmd.deps.mode = DepMode::full;
          break;
        case OptionRole::dep_nonsystem:
          note_listing_drops(option_at, i);
          m_cmd.deps.mode = DepMode::nonsystem;
          break;
        case OptionRole::dep_file:
          note_listing_drops(option_at, i);
          m_cmd.deps.file = *value;
          m_cmd.deps.explicit_file = true;
          break;
        case OptionRole::dep_target:
          note_listing_drops(option_at, i);
          m_cmd.deps.targets.push_back(*value);
          break;
        case OptionRole::dep_phony:
          note_listing_drops(option_at, i);
          m_cmd.deps.phony = true;
          break;
        case OptionRole::host_compiler:
          m_cmd.ccbin = *value;
          m_cmd.ccbin_from_env = false;
          break;
        case OptionRole::options_file:
          break;  // read by expand()
        case OptionRole::host_options:
          m_cmd.key_options.push_back(canonical);
          for (const auto& h : split_commas(*value)) {
            add_host_option(h);
          }
          break;
        case OptionRole::debug_paths:
          m_cmd.key_options.push_back(canonical);
          m_cmd.output_names_paths = true;
          break;
        case OptionRole::uncacheable: {
          const Uncacheable why = opt->long_name == "preprocess"                   ? Uncacheable::preprocess
                                  : starts_with(opt->reason, "dependencies only") ? Uncacheable::dependencies_only
                                  : starts_with(opt->reason, "no compile") || opt->long_name == "dryrun"
                                      ? Uncacheable::no_compile
                                  : opt->long_name == "link" || opt->long_name == "lib" || opt->long_name == "device-link" ||
                                          opt->long_name == "run" || opt->long_name == "run-args" ||
                                          opt->long_name == "relocatable-link"
                                      ? Uncacheable::link
                                  : starts_with(opt->reason, "intermediate") || starts_with(opt->reason, "a t") ||
                                          opt->long_name == "output-directory"
                                      ? Uncacheable::side_output
                                      : Uncacheable::other;
          fail(why, std::string(opt->reason) + ": " + tok);
          break;
        }
        case OptionRole::forward_unknown:
          m_cmd.key_options.push_back(canonical);
          if (opt->long_name != "forward-unknown-to-host-linker") {
            forward_unknown = true;
          }
          break;
      }
    }
    finish(phase);
  }

  std::vector<std::string> m_expanded;
  std::vector<std::size_t> m_origin;  // index in the command line, or k_not_an_argument
  static constexpr std::size_t k_not_an_argument = SIZE_MAX;

 private:
  // Notes that the option at m_expanded[first..last] (its value included) is
  // one a dependency listing leaves out (nvcc/nvcc_command.hpp).
  void note_listing_drops(std::size_t first, std::size_t last) {
    for (std::size_t i = first; i <= last; ++i) {
      if (m_origin[i] == k_not_an_argument) {
        m_listing_from_elsewhere = true;
      } else {
        m_cmd.listing_drops.push_back(m_origin[i]);
      }
    }
  }
  bool m_listing_from_elsewhere = false;

  void add_host_option(const std::string& h) {
    if (const auto why = host_option_problem(h); !why.empty()) {
      fail(Uncacheable::host_option, "the host compiler option " + h + " " + std::string(why));
    }
    if (starts_with(h, "-g")) {
      m_cmd.output_names_paths = true;
    }
    m_cmd.host_options.push_back(h);
  }

  void note_path_option(const NvccOption& opt, const std::optional<std::string>& value) {
    if (!value) {
      return;
    }
    // nvcc takes these as comma-separated lists.
    if (opt.long_name == "include-path") {
      for (auto& v : split_commas(*value)) {
        m_cmd.include_dirs.push_back(std::move(v));
      }
    } else if (opt.long_name == "system-include") {
      for (auto& v : split_commas(*value)) {
        m_cmd.system_dirs.push_back(std::move(v));
      }
    } else if (opt.long_name == "pre-include") {
      for (auto& v : split_commas(*value)) {
        m_cmd.pre_includes.push_back(std::move(v));
      }
    }
  }

  void finish(const std::optional<std::string>& phase) {
    if (!phase) {
      fail(Uncacheable::link, "no compile phase (-c, -dc, -ptx, -cubin, -fatbin ...): nvcc links");
    }
    if (m_inputs.empty()) {
      fail(Uncacheable::no_input, "no input file");
    } else if (m_inputs.size() > 1) {
      fail(Uncacheable::several_inputs, std::to_string(m_inputs.size()) + " input files");
    }
    if (!phase || m_inputs.empty()) {
      return;
    }
    const std::string& p = *phase;
    m_cmd.output_kind = p == "ptx"        ? OutputKind::ptx
                        : p == "cubin"    ? OutputKind::cubin
                        : p == "fatbin"   ? OutputKind::fatbin
                        : p == "optix-ir" ? OutputKind::optixir
                        : p == "ltoir"    ? OutputKind::ltoir
                        : p == "cuda"     ? OutputKind::cuda_cpp
                                          : OutputKind::object;
    m_cmd.input = m_inputs.front();
    bool language_given = false;
    for (const auto& o : m_cmd.key_options) {
      language_given = language_given || starts_with(o, "--x=");
    }
    const std::string ext = lower(std::filesystem::path(m_cmd.input).extension().string());
    static constexpr std::string_view k_sources[] = {".cu", ".c", ".cc", ".cpp", ".cxx", ".c++", ".i", ".ii", ".gpu", ".ptx"};
    bool source = language_given;
    for (const auto s : k_sources) {
      source = source || ext == s;
    }
    if (!source) {
      fail(Uncacheable::input_kind, "the input " + m_cmd.input + " is not a source nvcc compiles");
    }
    if (!m_cmd.explicit_output) {
      const std::filesystem::path in(m_cmd.input);
      m_cmd.output = m_cmd.output_kind == OutputKind::cuda_cpp
                         ? in.filename().string() + ".cpp.ii"
                         : in.stem().string() + std::string(default_extension(m_cmd.output_kind));
    }
    if (m_cmd.deps.mode != DepMode::none && !m_cmd.deps.explicit_file) {
      m_cmd.deps.file = std::filesystem::path(m_cmd.output).replace_extension(".d").string();
    }
    if (m_cmd.deps.mode == DepMode::nonsystem && m_listing_from_elsewhere) {
      fail(Uncacheable::other, "-MMD with the output, phase or dependency options in NVCC_PREPEND_FLAGS, "
                               "NVCC_APPEND_FLAGS or an options file");
    }
    if (m_cmd.deps.mode == DepMode::none && (m_cmd.deps.explicit_file || !m_cmd.deps.targets.empty() || m_cmd.deps.phony)) {
      // -MF, -MT or -MP without -MD/-MMD: nvcc ignores them for a compile;
      // kcache does not guess and lets nvcc run.
      fail(Uncacheable::other, "-MF, -MT or -MP without -MD or -MMD");
    }
  }

  NvccCommand& m_cmd;
  std::vector<std::string> m_inputs;
};

}  // namespace

std::string_view to_string(Uncacheable reason) noexcept {
  switch (reason) {
    case Uncacheable::none:
      return "none";
    case Uncacheable::link:
      return "link";
    case Uncacheable::no_input:
      return "no_input";
    case Uncacheable::several_inputs:
      return "several_inputs";
    case Uncacheable::input_kind:
      return "input_kind";
    case Uncacheable::preprocess:
      return "preprocess";
    case Uncacheable::dependencies_only:
      return "dependencies_only";
    case Uncacheable::unknown_option:
      return "unknown_option";
    case Uncacheable::side_output:
      return "side_output";
    case Uncacheable::host_option:
      return "host_option";
    case Uncacheable::no_compile:
      return "no_compile";
    case Uncacheable::options_file:
      return "options_file";
    case Uncacheable::environment:
      return "environment";
    case Uncacheable::other:
      return "other";
    case Uncacheable::count_:
      break;
  }
  return "?";
}

std::string_view kind_name(OutputKind kind) noexcept {
  switch (kind) {
    case OutputKind::object:
      return "object";
    case OutputKind::ptx:
      return "ptx";
    case OutputKind::cubin:
      return "cubin";
    case OutputKind::fatbin:
      return "fatbin";
    case OutputKind::optixir:
      return "optixir";
    case OutputKind::ltoir:
      return "ltoir";
    case OutputKind::cuda_cpp:
      return "cuda-cpp";
  }
  return "object";
}

NvccEnvironment NvccEnvironment::from_process() {
  NvccEnvironment e;
  if (const char* v = std::getenv("NVCC_PREPEND_FLAGS")) {
    e.prepend_flags = v;
    e.has_prepend = true;
  }
  if (const char* v = std::getenv("NVCC_APPEND_FLAGS")) {
    e.append_flags = v;
    e.has_append = true;
  }
  if (const char* v = std::getenv("NVCC_CCBIN")) {
    e.ccbin = v;
    e.has_ccbin = true;
  }
  return e;
}

std::vector<std::string> split_options_file(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        cur += text[++i];
      } else {
        cur += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      if (in_word) {
        out.push_back(std::move(cur));
        cur.clear();
        in_word = false;
      }
      continue;
    }
    in_word = true;
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
    } else {
      cur += c;
    }
  }
  if (in_word) {
    out.push_back(std::move(cur));
  }
  return out;
}

std::vector<std::string> split_environment_flags(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  bool quoted = false;
  for (const char c : text) {
    if (!quoted && (c == ' ' || c == '\t' || c == '\n')) {
      if (in_word) {
        out.push_back(std::move(cur));
        cur.clear();
        in_word = false;
      }
      continue;
    }
    in_word = true;
    if (c == '"') {
      quoted = !quoted;
    }
    cur += c;
  }
  if (in_word) {
    out.push_back(std::move(cur));
  }
  return out;
}

NvccCommand parse_command(const std::vector<std::string>& args, const NvccEnvironment& env) {
  NvccCommand cmd;
  cmd.args = args;
  if (env.has_ccbin) {
    cmd.ccbin = env.ccbin;
    cmd.ccbin_from_env = true;
  }
  Parser p(cmd);
  if (env.has_prepend) {
    p.expand(split_environment_flags(env.prepend_flags), 0);
  }
  p.expand(args, 0, /*from_args=*/true);
  if (env.has_append) {
    p.expand(split_environment_flags(env.append_flags), 0);
  }
  p.parse();
  return cmd;
}

}  // namespace kcache::nvcc
