// deps/directive_scanner.hpp: lists the include-like directives of one
// CUDA C++ file in a single pass, without copying it (private).
//
// The scan lexes the file as translation phases 1-3 do, as far as the
// directives need: it skips block and line comments, string, character and
// raw string literals (digit separators are not literals), joins
// backslash-newline continuations, and looks at a `#` or `%:` only where it
// is the first token of a line. Only those directive lines are copied. A scan
// may take more lines for directives than the compiler does (an `#include`
// inside `#if 0`, or after a comment that ends a line of code), which only adds
// inputs to a key; it must never miss one the compiler acts on.
//
// `__has_include` is looked for on directive lines only: the compiler
// evaluates it nowhere else (a macro that expands to it is defined on a
// `#define` line, which is scanned).
//
// Not handled (and not before either): trigraphs (`??=include`), and a
// backslash followed by blanks before the newline as a continuation.
//
// scan_file() also returns every `#define` (name, parameters, body): a
// computed `#include MACRO(x)` is expanded with them (deps/macro_expander.hpp).
//
// Thread-safety: find_directives() and scan_file() keep no state; they are thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kcache::jit {

// One directive found in a file.
struct IncludeDirective {
  std::string name;       // the header name; for a computed one, the directive's tokens
  bool angled = false;
  bool computed = false;  // `#include MACRO...` / `__has_include(MACRO...)`: `name` must be expanded
  friend bool operator==(const IncludeDirective&, const IncludeDirective&) = default;
};

// One `#define` line. Conditionals are not evaluated: every definition of a
// name in a file is listed, in order.
struct MacroDefinition {
  std::string name;
  bool function_like = false;
  std::string params;  // function-like: the text between the parentheses
  std::string body;    // the replacement list (comments replaced by blanks)
  friend bool operator==(const MacroDefinition&, const MacroDefinition&) = default;
};

// The directives of one file that decide what it includes.
struct FileDirectives {
  std::vector<IncludeDirective> includes;  // literal and computed, in order
  std::vector<MacroDefinition> defines;
  // The text holds `__builtin_FILE`, `__builtin_source_location`,
  // `source_location` or `__BASE_FILE__` anywhere (comments and #defines
  // too): what can name the main file wherever it is evaluated
  // (deps/name_directory.hpp).
  bool names_main_file = false;
};

// Lists the `#include`, `#include_next`, `#import` and `__has_include`
// directives of `text` that name a literal file, in order. Sets `computed`
// (when not null and still empty) to a description ("line 12: #include MACRO")
// when a directive names no literal file; kcache then cannot know the inputs.
std::vector<IncludeDirective> find_directives(std::string_view text, std::string* computed);

// Whether scan_file() looks for the tokens that name the main file
// (FileDirectives::names_main_file; `skip` leaves it false): the toolkit's
// headers are scanned for their include names only.
enum class MainFileTokens { look, skip };

// Lists every include-like directive of `text` (computed ones with
// computed=true and their tokens as the name) and every `#define`.
FileDirectives scan_file(std::string_view text, MainFileTokens tokens = MainFileTokens::look);

} // namespace kcache::jit
