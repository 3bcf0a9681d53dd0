#include "kcache/compile_options.hpp"

#include <algorithm>
#include <array>
#include <optional>

namespace kcache {

namespace {

enum class Arity { flag, value };
enum class Order { free, kept };

struct OptionSpec {
  std::string_view long_name;   // without the leading "--"
  std::string_view short_name;  // without the leading "-"
  Arity arity;
  Order order;
  bool refused = false;  // has side effects outside the output
  std::string_view alias_of = {};  // flag that means "<alias_of>" (a full canonical option)
  bool separate_value = true;      // NVRTC takes the value as the next argument too ("-arch", "sm_90")
};

// NVRTC 13 options (nvrtc.h, "Supported Compile Options"). Which spellings
// NVRTC 13.0 accepts was measured with the real library (docs/keys.md,
// "Options"): `--name=value` and `-short=value` for every option; the value as
// the next argument for all but -std, -frandom-seed and -opt-info; an attached
// value (`-DX`, `-I dir`) only for the one-letter -D, -U and -I; whitespace
// around the whole argument is ignored. Any other spelling (`-w -G`, `-Gx`,
// `-arch sm_90`, `-Xptxas -g` as one argument) is an unrecognized option.
constexpr std::array k_nvrtc_options = {
    OptionSpec{"gpu-architecture", "arch", Arity::value, Order::free},
    OptionSpec{"device-c", "dc", Arity::flag, Order::free, false, "--relocatable-device-code=true"},
    OptionSpec{"device-w", "dw", Arity::flag, Order::free, false, "--relocatable-device-code=false"},
    OptionSpec{"relocatable-device-code", "rdc", Arity::value, Order::free},
    OptionSpec{"extensible-whole-program", "ewp", Arity::flag, Order::free},
    OptionSpec{"device-debug", "G", Arity::flag, Order::free},
    OptionSpec{"generate-line-info", "lineinfo", Arity::flag, Order::free},
    OptionSpec{"dopt", "dopt", Arity::value, Order::free},
    OptionSpec{"Ofast-compile", "Ofc", Arity::value, Order::free},
    OptionSpec{"ptxas-options", "Xptxas", Arity::value, Order::kept},
    OptionSpec{"maxrregcount", "maxrregcount", Arity::value, Order::free},
    OptionSpec{"ftz", "ftz", Arity::value, Order::free},
    OptionSpec{"prec-sqrt", "prec-sqrt", Arity::value, Order::free},
    OptionSpec{"prec-div", "prec-div", Arity::value, Order::free},
    OptionSpec{"fmad", "fmad", Arity::value, Order::free},
    OptionSpec{"use_fast_math", "use_fast_math", Arity::flag, Order::free},
    OptionSpec{"extra-device-vectorization", "extra-device-vectorization", Arity::flag, Order::free},
    OptionSpec{"modify-stack-limit", "modify-stack-limit", Arity::value, Order::free},
    OptionSpec{"dlink-time-opt", "dlto", Arity::flag, Order::free},
    OptionSpec{"gen-opt-lto", "gen-opt-lto", Arity::flag, Order::free},
    OptionSpec{"optix-ir", "optix-ir", Arity::flag, Order::free},
    OptionSpec{"jump-table-density", "jtd", Arity::value, Order::free},
    OptionSpec{"device-stack-protector", "device-stack-protector", Arity::value, Order::free},
    OptionSpec{"no-cache", "no-cache", Arity::flag, Order::free},
    OptionSpec{"frandom-seed", "frandom-seed", Arity::value, Order::free, false, {}, false},
    OptionSpec{"define-macro", "D", Arity::value, Order::kept},
    OptionSpec{"undefine-macro", "U", Arity::value, Order::kept},
    OptionSpec{"include-path", "I", Arity::value, Order::kept},
    OptionSpec{"pre-include", "include", Arity::value, Order::kept},
    OptionSpec{"no-source-include", "no-source-include", Arity::flag, Order::free},
    OptionSpec{"std", "std", Arity::value, Order::free, false, {}, false},
    OptionSpec{"builtin-move-forward", "builtin-move-forward", Arity::value, Order::free},
    OptionSpec{"builtin-initializer-list", "builtin-initializer-list", Arity::value, Order::free},
    OptionSpec{"disable-warnings", "w", Arity::flag, Order::free},
    OptionSpec{"restrict", "restrict", Arity::flag, Order::free},
    OptionSpec{"device-as-default-execution-space", "default-device", Arity::flag, Order::free},
    OptionSpec{"device-int128", "device-int128", Arity::flag, Order::free},
    OptionSpec{"device-float128", "device-float128", Arity::flag, Order::free},
    OptionSpec{"optimization-info", "opt-info", Arity::value, Order::kept, false, {}, false},
    OptionSpec{"display-error-number", "err-no", Arity::flag, Order::kept},
    OptionSpec{"no-display-error-number", "no-err-no", Arity::flag, Order::kept},
    OptionSpec{"diag-error", "diag-error", Arity::value, Order::kept},
    OptionSpec{"diag-suppress", "diag-suppress", Arity::value, Order::kept},
    OptionSpec{"diag-warn", "diag-warn", Arity::value, Order::kept},
    OptionSpec{"brief-diagnostics", "brief-diag", Arity::value, Order::free},
    OptionSpec{"split-compile", "split-compile", Arity::value, Order::free},
    OptionSpec{"fdevice-syntax-only", "fdevice-syntax-only", Arity::flag, Order::free},
    OptionSpec{"minimal", "minimal", Arity::flag, Order::free},
    // Side effects outside the output, or inputs kcache cannot see: refused.
    OptionSpec{"pch", "pch", Arity::flag, Order::free, true},
    OptionSpec{"create-pch", "create-pch", Arity::value, Order::free, true},
    OptionSpec{"use-pch", "use-pch", Arity::value, Order::free, true},
    OptionSpec{"pch-dir", "pch-dir", Arity::value, Order::free, true},
    OptionSpec{"pch-verbose", "pch-verbose", Arity::value, Order::free, true},
    OptionSpec{"pch-messages", "pch-messages", Arity::value, Order::free, true},
    OptionSpec{"instantiate-templates-in-pch", "instantiate-templates-in-pch", Arity::value, Order::free, true},
    OptionSpec{"time", "time", Arity::value, Order::free, true},
    OptionSpec{"fdevice-time-trace", "fdevice-time-trace", Arity::value, Order::free, true},
};

struct Parsed {
  const OptionSpec* spec = nullptr;  // null: unknown, kept verbatim
  std::string value;
  std::string verbatim;
};

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  return s;
}

bool nvrtc_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// `s` without the whitespace NVRTC ignores around an argument (" -G" is -G).
std::string_view trim(std::string_view s) {
  while (!s.empty() && nvrtc_blank(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && nvrtc_blank(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

// Parses one option starting at options[i]; advances i past a separate value.
// A spelling NVRTC does not accept is unknown (spec null): it goes to NVRTC
// verbatim, which refuses it, and is never rewritten into an option NVRTC
// would accept.
Result<Parsed> parse_one(const std::vector<std::string>& options, std::size_t& i) {
  const std::string& given = options[i];
  const std::string tok(trim(given));
  Parsed p;
  p.verbatim = given;
  std::string_view body = tok;
  bool is_long = false;
  if (body.rfind("--", 0) == 0) {
    body.remove_prefix(2);
    is_long = true;
  } else if (body.rfind('-', 0) == 0) {
    body.remove_prefix(1);
  } else {
    return p;  // not an option: unknown, verbatim
  }
  for (const auto& spec : k_nvrtc_options) {
    const std::string_view name = is_long ? spec.long_name : spec.short_name;
    if (body == name) {
      if (spec.arity == Arity::flag) {
        p.spec = &spec;
        return p;
      }
      if (!spec.separate_value) {
        return p;  // NVRTC: "unrecognized option -std" (the value must follow '=')
      }
      if (i + 1 >= options.size()) {
        return make_error(ErrorCode::invalid_argument, "option '" + given + "' needs a value");
      }
      p.spec = &spec;
      p.value = options[++i];
      return p;
    }
    if (body.size() <= name.size() || body.rfind(name, 0) != 0) {
      continue;
    }
    if (body[name.size()] == '=') {
      if (spec.arity == Arity::flag) {
        return make_error(ErrorCode::invalid_argument, "option '" + given + "' takes no value");
      }
      const std::string_view rest = body.substr(name.size() + 1);
      if (rest.empty()) {
        return make_error(ErrorCode::invalid_argument, "option '" + given + "' needs a value");
      }
      p.spec = &spec;
      p.value = std::string(rest);
      return p;
    }
    // Only the one-letter -D, -U and -I take an attached value (-DX, -I dir).
    if (!is_long && name.size() == 1 && spec.arity == Arity::value) {
      p.spec = &spec;
      p.value = std::string(trim_left(body.substr(1)));
      return p;
    }
  }
  return p;
}

}  // namespace

Result<CanonicalOptions> canonicalize_nvrtc_options(const std::vector<std::string>& options) {
  CanonicalOptions out;
  std::vector<std::pair<std::string, std::string>> free;  // (sort name, canonical text)
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < options.size(); ++i) {
    auto parsed = parse_one(options, i);
    if (!parsed) {
      return tl::unexpected(parsed.error());
    }
    const auto& p = *parsed;
    if (p.spec == nullptr) {
      kept.push_back(p.verbatim);
      continue;
    }
    if (p.spec->refused) {
      return make_error(ErrorCode::unsupported,
                        "option '" + p.verbatim + "' (--" + std::string(p.spec->long_name) +
                            ") writes or reads files outside the compile output, which a cache cannot "
                            "replay; remove it (kcache caches the compile itself)");
    }
    std::string canonical;
    if (!p.spec->alias_of.empty()) {
      canonical = std::string(p.spec->alias_of);
    } else if (p.spec->arity == Arity::flag) {
      canonical = "--" + std::string(p.spec->long_name);
    } else {
      canonical = "--" + std::string(p.spec->long_name) + "=" + p.value;
    }
    const std::string_view ln = p.spec->long_name;
    if (ln == "gpu-architecture") {
      out.arch = p.value;
    } else if (ln == "include-path") {
      out.include_dirs.push_back(p.value);
    } else if (ln == "pre-include") {
      out.pre_includes.push_back(p.value);
    } else if (ln == "no-source-include") {
      out.no_source_include = true;
    }
    if (p.spec->order == Order::kept) {
      kept.push_back(std::move(canonical));
    } else {
      const auto eq = canonical.find('=');
      free.emplace_back(canonical.substr(0, eq), std::move(canonical));
    }
  }
  std::stable_sort(free.begin(), free.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& f : free) {
    out.options.push_back(std::move(f.second));
  }
  for (auto& k : kept) {
    out.options.push_back(std::move(k));
  }
  return out;
}

namespace {

// nvJitLink and libNVVM take every option with a value as one argument,
// `-arch=sm_90`; both refuse the value as the next argument ("-arch",
// "sm_90") or after a space ("-arch sm_90"), measured with nvJitLink and
// libNVVM 13.0. Those spellings are refused here, naming the option, rather
// than rewritten into one the library accepts; every option is kept as given.
Result<CanonicalOptions> canonicalize_dash_equals(const std::vector<std::string>& options,
                                                  const std::vector<std::string_view>& value_options,
                                                  std::string_view library) {
  CanonicalOptions out;
  for (const auto& tok : options) {
    const std::string name = tok.substr(0, tok.find_first_of("= "));
    if (std::find(value_options.begin(), value_options.end(), name) == value_options.end()) {
      out.options.push_back(tok);
      continue;
    }
    if (tok.size() == name.size() || tok[name.size()] != '=') {
      return make_error(ErrorCode::invalid_argument,
                        "option '" + tok + "': " + std::string(library) + " takes its value only after '=' (" +
                            name + "=VALUE, one argument) and refuses this spelling");
    }
    const std::string value = tok.substr(name.size() + 1);
    if (value.empty()) {
      return make_error(ErrorCode::invalid_argument, "option '" + tok + "' needs a value");
    }
    if (name == "-arch") {
      out.arch = value;
    }
    out.options.push_back(tok);
  }
  return out;
}

}  // namespace

Result<CanonicalOptions> canonicalize_nvjitlink_options(const std::vector<std::string>& options) {
  return canonicalize_dash_equals(
      options, {"-arch", "-maxrregcount", "-ftz", "-prec-div", "-prec-sqrt", "-fma", "-Xptxas", "-split-compile",
                "-split-compile-extended", "-jump-table-density", "-kernels-used", "-variables-used", "-Xlinker"},
      "nvJitLink");
}

Result<CanonicalOptions> canonicalize_nvvm_options(const std::vector<std::string>& options) {
  return canonicalize_dash_equals(options, {"-arch", "-opt", "-ftz", "-prec-sqrt", "-prec-div", "-fma", "-jtd"},
                                  "libNVVM");
}

}  // namespace kcache
