// deps/name_directory.hpp: whether NVRTC's output can depend on the
// directory part of the program name (private).
//
// JIT users such as CuPy name each program after a fresh temporary file
// (`/tmp/tmpab12cd/kern.cu`); keyed verbatim, no two processes would share an
// entry. NVRTC uses the program name's directory only
//   - in line tables and debug information (`-lineinfo`, `-G`) and in LTO-IR
//     (decided from the options: deps/dependencies.cpp);
//   - to resolve the main source's quoted includes (measured: never a header's,
//     nor an angled include), which a `--pre-include` or an in-memory header
//     may also reach;
//   - where `__FILE__` (or `__FILE_NAME__`) is expanded with the main source as
//     the current file: in the main source itself, in a command-line macro, or
//     in a macro the main source expands, directly or through other macros.
//     NVRTC's built-in `assert` (no #include needed) is such a macro;
//   - wherever `__BASE_FILE__` is expanded, and wherever `__builtin_FILE()` or
//     `__builtin_source_location()` is evaluated: a default argument
//     (`cuda::std::source_location::current()`) is evaluated at the call
//     site, which may be in the main source. These are taken as soon as any
//     file of the closure names them (or `source_location`), anywhere.
// The static rules sort a request into one of three classes:
//   - `matters`: the options (-lineinfo, -G, ltoir: deps/dependencies.cpp), a
//     quoted or computed include of the main source, a `--pre-include`, an
//     in-memory header's quoted include, or `__FILE__` / `__FILE_NAME__` /
//     `assert` that the main source or a -D value names, directly or through
//     macros: the directory is keyed;
//   - `may_matter`: only facts the rules cannot follow to the main source: any
//     file of the closure, the source or a -D value names `__builtin_FILE`,
//     `source_location` or `__BASE_FILE__`; toolkit headers (not scanned) are
//     reached; or a `#define` of any of them pastes tokens (`##`), which can
//     form `__FILE__` or `assert` (`CAT(__FI, LE__)`). The compile decides it
//     from evidence (compile/name_evidence.hpp): the output under the name and
//     under a probe name in another directory, compared byte for byte;
//   - `cannot_matter`: the directory is left out of the key.
// The decision has two parts, since a header scan's result is shared by
// requests with other sources and -D values (deps/scan_inputs.hpp: a family
// member with the same roots):
//   - NameDirectoryCheck, during a scan, decides what the closure alone decides
//     (the source's include directives are among the roots): because() for
//     `matters`, doubt() for `may_matter`, and lists the macros of the
//     closure's files that may expand `__FILE__`;
//   - name_directory_verdict(), per request, adds the source's text and the -D
//     values.
// It is conservative: every `#define` of every scanned file counts, whatever
// `#if` it sits under, and every identifier of the main source counts
// (comments and strings too).
//
// Thread-safety: one check per scan; the functions keep no state.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deps/directive_scanner.hpp"

namespace kcache::jit {

// Whether `text` holds `__builtin_FILE`, `__builtin_source_location`,
// `source_location` or `__BASE_FILE__` (backslash-newlines joined first).
bool mentions_main_file_anywhere(std::string_view text);

class NameDirectoryCheck {
public:
  // The main source's directives (its quoted includes search the directory).
  void add_source(const FileDirectives& d);
  // An in-memory header: its quoted includes may search the name's directory.
  void add_memory_header(const std::string& name, const FileDirectives& d);
  // A disk header of the closure. REQUIRES: `d` outlives file_macros().
  void add_header(const std::string& path, const FileDirectives& d);
  // A fact that decides it on its own (a --pre-include).
  void add_reason(std::string why);
  // A fact after which only evidence decides it (unscanned toolkit headers).
  void add_doubt(std::string why);

  // Why the closure lets the directory reach the output; empty when it alone does not.
  const std::string& because() const { return m_reason; }
  // With because() empty: why the closure may let it reach the output
  // (`may_matter`); empty when it cannot.
  const std::string& doubt() const { return m_doubt; }
  // With because() empty: every macro of the in-memory and disk headers that
  // may expand `__FILE__` (its body names it or such a macro), sorted.
  std::vector<std::string> file_macros() const;

private:
  void add_defines(const FileDirectives& d, bool copy);
  void doubt_pasting(const std::string& where, const FileDirectives& d);
  std::string m_reason;  // the first decisive fact
  std::string m_doubt;   // the first fact that leaves it to evidence
  std::deque<std::string> m_owned;  // copies of the in-memory headers' defines
  std::vector<std::pair<std::string_view, std::string_view>> m_defines;  // (name, body)
};

enum class NameDirectoryClass { cannot_matter, may_matter, matters };

struct NameDirectoryVerdict {
  NameDirectoryClass kind = NameDirectoryClass::cannot_matter;
  std::string because;  // why it matters or may matter; empty for cannot_matter
};

// Whether the program name's directory can reach NVRTC's output for `source`
// and the -D values `defines` (`NAME`, `NAME=VALUE`), given what its
// closure's scan found (`closure_seen`: NameDirectoryCheck::because(),
// `closure_doubt`: doubt(), `file_macros`). A macro of the source or the
// command line that may expand `__FILE__` makes it matter (a header's macro
// may name it); `matters` wins over `may_matter`.
NameDirectoryVerdict name_directory_verdict(std::string_view source, const std::vector<std::string>& defines,
                                            const std::string& closure_seen, const std::string& closure_doubt,
                                            const std::vector<std::string>& file_macros);

}  // namespace kcache::jit
