// deps/computed_includes.hpp: the computed includes of one header scan
// (`#include MACRO(x)`), expanded to a fixed point with every definition the
// scan found and what NVRTC predefines (private).
//
// A scan (deps/closure_scan.cpp) notes each computed include it meets; at each
// quiet point (no file left to read) it calls expand(), which expands every
// include whose definitions changed since its last expansion
// (deps/macro_expander.hpp) and hands the header names formed back to the scan
// as more work. Every identifier an expansion looks up may be predefined by
// NVRTC: what is remembered applies at once (deps/predefined_macros.hpp); the
// others are taken as undefined until the fixed point, where ask_pending()
// asks all of them with one probe (a probe is a whole NVRTC compile: CuPy's
// Thrust headers needed seven, one per round). Answers can only add
// definitions, so the fixed point continues from there and ends where every
// looked-up identifier has its answer.
//
// Thread-safety: none (one per scan, used by its thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deps/directive_scanner.hpp"
#include "deps/header_scanner.hpp"
#include "deps/macro_expander.hpp"
#include "deps/predefined_macros.hpp"

namespace kcache::jit {

class ComputedIncludes {
public:
  // The scan's directories, numbered by it (ClosureScan's DirList).
  using DirIds = std::vector<std::uint32_t>;
  // Hands header names an expansion formed to the scan, to be resolved from
  // `includer_dirs` like the literal includes of `where`.
  using AddWork =
      std::function<void(std::vector<IncludeDirective> names, const DirIds& includer_dirs, const std::string& where)>;
  // Adds definitions to the scan's table (and moves its version when one is new).
  using AddDefines = std::function<void(const std::vector<MacroDefinition>& defines)>;

  // `table` and `table_version`: the scan's macro table and the counter its
  // AddDefines moves; `not_cacheable`: the scan's verdict, set here when an
  // include cannot be keyed. All must outlive this object.
  ComputedIncludes(const ScanInput& in, bool with_predefined, const MacroTable& table,
                   const std::uint64_t& table_version, std::string& not_cacheable, AddWork add_work,
                   AddDefines add_defines);

  // Notes the computed include `tokens` of `where`, resolved from `includer_dirs`.
  void note(std::string tokens, DirIds includer_dirs, std::string where);

  // Expands every noted include whose definitions changed since its last
  // expansion; stops (the verdict set) at the first that cannot be keyed.
  void expand();

  // Whether identifiers were taken as undefined without asking NVRTC yet.
  bool has_pending() const { return !m_pending.empty(); }

  // Asks NVRTC about every pending identifier with one probe and applies the
  // answers. False (the verdict set) when that fails or an answer cannot be used.
  bool ask_pending();

  // With has_pending(): why a scan that stops now is not cacheable.
  std::string stopped_before_asking() const;

  // Every identifier an expansion looked up (the family's roots, deps/scan_inputs.hpp).
  const std::set<std::string>& looked_up() const { return m_looked_up; }

private:
  struct Computed {
    std::string tokens;
    DirIds includer_dirs;
    std::string where;
    std::uint64_t expanded_at = 0;  // the table's version at the last expansion, plus one (0: never)
  };

  bool add_predefined(const Computed& c, const std::vector<std::string>& identifiers);
  template <class WhereOf>
  bool apply_predefined(const std::map<std::string, PredefinedAnswer>& answers, WhereOf where_of);

  const ScanInput& m_in;
  bool m_with_predefined;
  const MacroTable& m_table;
  const std::uint64_t& m_table_version;
  std::string& m_not_cacheable;
  AddWork m_add_work;
  AddDefines m_add_defines;
  std::vector<Computed> m_computed;
  std::set<std::pair<std::string, DirIds>> m_expanded;
  std::set<std::string> m_looked_up;  // by every expansion of a computed include (the family's roots)
  std::set<std::string> m_asked;      // identifiers whose predefinition is known (or being asked)
  std::map<std::string, std::string> m_pending;  // not asked yet (taken as undefined): name -> where it was looked up
};

}  // namespace kcache::jit
