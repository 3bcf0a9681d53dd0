// deps/predefined_macros.hpp: the macros NVRTC predefines for one request,
// asked of the loaded NVRTC (private).
//
// A computed `#include STR(CAT(ver, __CUDACC_VER_MAJOR__).h)` names a header
// only through a macro that no file defines: NVRTC predefines it, from its
// version, the arch (`__CUDA_ARCH__`, `__CUDA_ARCH_LIST__`,
// `__CUDA_ARCH_FEAT_SM90_ALL`), `-std` (`__cplusplus`), `-rdc`, `-G`,
// `-use_fast_math` and more. kcache does not keep a list of them: it asks
// NVRTC with a probe compile of a tiny program whose `#pragma message` lines
// print, per identifier, whether it is defined and what it expands to (the
// stringized expansion), with the request's options (less `-I`,
// `--pre-include`, `-D` and the options that change diagnostics only).
//
// Answers are remembered per context (library identity, toolkit headers
// fingerprint and those options): in memory for the process, and in
// `<memo_dir>/predefined-<id>` (format below) so that a later process asks
// NVRTC only about identifiers no process asked about before. `memo_dir` is
// the per-user toolkit directory (`$XDG_CACHE_HOME/kcache-toolkit/`,
// deps/user_memo.hpp): the answers depend on the toolkit and the options
// only, so a new cache directory does not run the probe again; the cache
// directory's memo directory is the fallback where that one cannot be
// written. The context id names the library's build-id and version, the
// headers fingerprint and every option the probe keeps: another toolkit,
// arch, `-std` or option is another file. A hit that finds its header
// manifest never gets here (deps/header_scanner.hpp).
//
// File format (version 1), text, one answer per line, names sorted:
//   file   = "kcache-predefined 1\n" *answer
//   answer = ("U " name | "F " name | "D " name " " value) "\n"
//   name   = [A-Za-z_$][A-Za-z0-9_$]*     value = bytes other than "\n"
// U: not defined; F: defined, but not as an object-like macro kcache can
// use (function-like, or expanding to its own name); D: object-like,
// expanding to `value`. Anything else and the file is ignored (at most 1 MiB).
//
// Thread-safety: ask_predefined() is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/compile_request.hpp"
#include "kcache/error.hpp"

namespace kcache::jit {

// Runs one probe compile: `request` (an NVRTC request whose source is the
// probe program) with `options`, and returns the compiler's log. This layer
// runs no compiler itself: compile/ provides the one over the loaded NVRTC
// (jit::run_nvrtc_probe, compile/backends.hpp). Fails as that compile does
// (toolkit_missing, compile_failed with the log in Error::log).
using ProbeCompile = Result<std::string> (*)(const CompileRequest& request, const std::vector<std::string>& options);

struct PredefinedAnswer {
  enum class Kind : char { undefined = 'U', object_like = 'D', other = 'F' };
  Kind kind = Kind::undefined;
  std::string value;  // object_like: the full expansion, as stringizing spells it
  friend bool operator==(const PredefinedAnswer&, const PredefinedAnswer&) = default;
};

// What decides NVRTC's predefined macros for one request.
struct PredefinedContext {
  std::string id;                    // 64 hex: names the answers (in manifests and on disk)
  std::vector<std::string> options;  // the probe's options
  std::filesystem::path memo_dir;    // preferred (per user); empty: see fallback_dir
  std::filesystem::path fallback_dir;  // read after, and written when memo_dir cannot be; both empty: memory only
  ProbeCompile compile_probe = nullptr;  // runs the probe; null: an ask that needs NVRTC fails (unsupported)
};

// The context of a request compiled by the NVRTC `library_identity`
// (version and build id) with the toolkit headers `fingerprint` and canonical
// `options`, whose probes `compile_probe` runs.
PredefinedContext predefined_context(const std::string& library_identity, const std::string& fingerprint,
                                     const std::vector<std::string>& options, ProbeCompile compile_probe,
                                     std::filesystem::path memo_dir,
                                     std::filesystem::path fallback_dir = {});

// What NVRTC predefines for each of `names` (identifiers) in `context`.
// Loads NVRTC only when some name was never asked in this context. Fails
// (toolkit_missing, compile_failed, corrupt) when NVRTC cannot be loaded or
// its probe does not answer every name; the request is then not cacheable.
Result<std::map<std::string, PredefinedAnswer>> ask_predefined(const PredefinedContext& context,
                                                               const std::vector<std::string>& names);

// What is already known, without NVRTC, about each of `names` in `context`
// (in this process or in the memo files); names nobody asked yet are left out.
std::map<std::string, PredefinedAnswer> remembered_predefined(const PredefinedContext& context,
                                                              const std::vector<std::string>& names);

// Why an identifier in a computed include cannot be keyed whatever NVRTC
// predefines (`__FILE__`, `__LINE__`, `__COUNTER__`, `__DATE__` ... expand
// differently at each place or time; `__has_include`, `_Pragma` are
// operators); empty for any other name.
std::string_view unkeyable_macro_reason(std::string_view name);

// Whether NVRTC may predefine `name`: an identifier the C++ standard
// reserves to the implementation (one holding `__`, or `_` and an upper-case
// letter first), or one of the few others NVRTC documents or GNU modes
// define (`NULL`, `va_start`, `va_end`, `va_arg`, `va_copy`, `linux`, `unix`,
// `i386`). Only those are asked: the others are the program's own.
bool may_be_predefined(std::string_view name);

// How many probe compiles this process ran (each one NVRTC compile); for
// tests and benchmarks.
std::uint64_t predefined_probe_count() noexcept;

// Forgets the answers kept in memory; for tests.
void forget_predefined_answers();

}  // namespace kcache::jit
