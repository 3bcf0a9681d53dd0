// deps/macro_expander.hpp: the header names a computed `#include MACRO(x)`
// can stand for (private).
//
// Thrust, CUB and CuPy name headers through macros
// (`#include __THRUST_HOST_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE(swap_ranges.h)`).
// kcache does not evaluate conditional directives, so a macro may have several
// definitions (one per `#if` branch, one per file, one on the command line):
// the expansion takes EVERY definition of every macro it meets and returns
// every header name one of those combinations forms. That is a superset of
// what the compiler reads, whichever branch it takes, which is what a key
// needs (deps/header_scanner.hpp).
//
// The expansion follows the C preprocessor: object-like and function-like
// macros, argument pre-expansion, `#` (stringizing) and `##` (pasting),
// variadic macros, rescanning with hide sets (Prosser's algorithm). An
// identifier with no definition stays as it is (the caller learns which
// identifiers were looked up, to ask what NVRTC predefines). A result that is no header
// name (`"..."` or `<...>`) is dropped: the compiler would reject that line,
// so a compile that reads it cannot succeed.
//
// Bounded: at most k_max_alternatives results and k_max_steps expansions per
// directive; beyond that expand_include() reports an error and the request
// is not cacheable.
//
// Thread-safety: MacroTable is not synchronised; expand_include() only reads it.
#pragma once

#include <functional>
#include <map>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "deps/directive_scanner.hpp"

namespace kcache::jit {

// Every definition seen of each macro name.
class MacroTable {
public:
  // Adds `d` unless the same definition is already there; returns whether it was new.
  bool add(const MacroDefinition& d);

  // Adds a command-line definition: `NAME`, `NAME=VALUE` or `NAME(a,b)=VALUE` (as -D takes them).
  void add_command_line(std::string_view definition);

  // The definitions of `name` here, else those of the fallback (when set), else null.
  const std::vector<MacroDefinition>* find(std::string_view name) const;

  // Consulted for names this table does not define (the toolkit's macros).
  std::function<const std::vector<MacroDefinition>*(std::string_view)> fallback;

private:
  // Hashed, looked up by string_view: a scan over CuPy's tree adds ~30 000
  // definitions and a tree-ordered map spent most of their time comparing names.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<MacroDefinition>, NameHash, std::equal_to<>> m_defs;
};

inline constexpr std::size_t k_max_alternatives = 256;
inline constexpr std::size_t k_max_steps = 20000;

struct Expansion {
  std::vector<IncludeDirective> names;  // literal header names (computed = false), unique
  std::string error;                    // non-empty: the expansion was cut off (why)
  // Every identifier the expansion looked up as a macro name (defined here or
  // not), sorted: NVRTC may predefine any of them (deps/predefined_macros.hpp).
  std::vector<std::string> identifiers;
};

// Expands the tokens of a computed include (`tokens`, e.g. `HEADER(x.h)`) with
// every combination of the definitions in `table`.
Expansion expand_include(std::string_view tokens, const MacroTable& table);

}  // namespace kcache::jit
