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
// The decision has two parts, since a header scan's result is shared by
// requests with other sources and -D values (deps/scan_inputs.hpp: a family
// member with the same roots):
//   - NameDirectoryCheck, during a scan, decides what the closure alone decides
//     (the source's include directives are among the roots) and otherwise lists
//     the macros of the closure's files that may expand `__FILE__`;
//   - name_directory_seen_because(), per request, adds the source's text and the
//     -D values.
// It is conservative: every `#define` of every scanned file counts, whatever
// `#if` it sits under, and every identifier of the main source counts
// (comments and strings too). Not seen: a `__FILE__` formed by token pasting
// (`CAT(__FI, LE__)`), and trigraphs.
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
  // A fact that decides it on its own (a --pre-include, unscanned toolkit headers).
  void add_reason(std::string why);

  // Why the closure lets the directory reach the output; empty when it alone does not.
  const std::string& because() const { return m_reason; }
  // With because() empty: every macro of the in-memory and disk headers that
  // may expand `__FILE__` (its body names it or such a macro), sorted.
  std::vector<std::string> file_macros() const;

private:
  void add_defines(const FileDirectives& d, bool copy);
  std::string m_reason;  // the first decisive fact
  std::deque<std::string> m_owned;  // copies of the in-memory headers' defines
  std::vector<std::pair<std::string_view, std::string_view>> m_defines;  // (name, body)
};

// Why the program name's directory can reach NVRTC's output for `source` and
// the -D values `defines` (`NAME`, `NAME=VALUE`), given what its closure's
// scan found (`closure_seen`, `file_macros`: NameDirectoryCheck); empty when
// it cannot. A macro of the source or the command line that may expand
// `__FILE__` keeps the directory (a header's macro may name it).
std::string name_directory_seen_because(std::string_view source, const std::vector<std::string>& defines,
                                        const std::string& closure_seen, const std::vector<std::string>& file_macros);

}  // namespace kcache::jit
