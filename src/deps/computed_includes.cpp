// deps/computed_includes.cpp: a header scan's computed includes, expanded to a
// fixed point with what NVRTC predefines (deps/computed_includes.hpp).
#include "deps/computed_includes.hpp"

#include "deps/closure_scan.hpp"

namespace kcache::jit {

ComputedIncludes::ComputedIncludes(const ScanInput& in, bool with_predefined, const MacroTable& table,
                                   const std::uint64_t& table_version, std::string& not_cacheable, AddWork add_work,
                                   AddDefines add_defines)
    : m_in(in), m_with_predefined(with_predefined), m_table(table), m_table_version(table_version),
      m_not_cacheable(not_cacheable), m_add_work(std::move(add_work)), m_add_defines(std::move(add_defines)) {}

void ComputedIncludes::note(std::string tokens, DirIds includer_dirs, std::string where) {
  m_computed.push_back({std::move(tokens), std::move(includer_dirs), std::move(where), 0});
}

void ComputedIncludes::expand() {
  for (auto& c : m_computed) {
    if (c.expanded_at == m_table_version + 1) {
      continue;
    }
    c.expanded_at = m_table_version + 1;
    auto e = expand_include(c.tokens, m_table);
    m_looked_up.insert(e.identifiers.begin(), e.identifiers.end());
    if (!e.error.empty()) {
      m_not_cacheable = c.where + ": #include " + c.tokens + ": " + e.error;
      return;
    }
    if (!add_predefined(c, e.identifiers)) {
      return;
    }
    std::vector<IncludeDirective> names;
    for (auto& n : e.names) {
      if (m_expanded.insert({n.name, c.includer_dirs}).second) {
        names.push_back(std::move(n));
      }
    }
    if (!names.empty()) {
      m_add_work(std::move(names), c.includer_dirs, c.where);
    }
  }
}

// Adds NVRTC's `answers` as definitions; `where_of(name)`: the computed
// include that looked the name up, for the reason. False (not_cacheable
// set) when one is a macro kcache cannot expand.
template <class WhereOf>
bool ComputedIncludes::apply_predefined(const std::map<std::string, PredefinedAnswer>& answers, WhereOf where_of) {
  for (const auto& [name, a] : answers) {
    if (a.kind == PredefinedAnswer::Kind::other) {
      m_not_cacheable = where_of(name) + "NVRTC predefines " + name + " as a macro kcache does not expand";
      return false;
    }
    if (a.kind == PredefinedAnswer::Kind::object_like) {
      // The toolkit's definitions stay alternatives once the table has its own.
      if (const auto* known = m_table.find(name)) {
        const auto copy = *known;
        m_add_defines(copy);
      }
      m_add_defines({MacroDefinition{name, false, {}, a.value}});
    }
  }
  return true;
}

// Adds what NVRTC predefines for the `identifiers` computed include `c`
// looked up, as more definitions (the table's version moves, so every
// computed include is expanded again). An identifier nobody asked NVRTC
// about yet is taken as undefined until the fixed point (ask_pending()).
// False (not_cacheable set) when that cannot be known, or must be asked in
// the predefined pass.
bool ComputedIncludes::add_predefined(const Computed& c, const std::vector<std::string>& identifiers) {
  std::vector<std::string> ask;
  for (const auto& id : identifiers) {
    if (id == "defined" || id == "__VA_ARGS__" || id == "__VA_OPT__" || !may_be_predefined(id) ||
        !m_asked.insert(id).second) {
      continue;
    }
    if (const auto why = unkeyable_macro_reason(id); !why.empty()) {
      m_not_cacheable = c.where + ": #include " + c.tokens + ": uses " + id + ", and " + std::string(why);
      return false;
    }
    ask.push_back(id);
  }
  if (ask.empty()) {
    return true;
  }
  const std::string where = c.where + ": #include " + c.tokens + ": ";
  if (!m_with_predefined) {
    std::string names;
    for (std::size_t i = 0; i < ask.size() && i < 4; ++i) {
      names += (i == 0 ? "" : ", ") + ask[i];
    }
    m_not_cacheable = std::string(k_needs_predefined) + where + "uses " + names + (ask.size() > 4 ? " ..." : "") +
                      ", which NVRTC may predefine, and kcache cannot ask NVRTC here";
    return false;
  }
  // What is known already applies now; the others are taken as undefined
  // until the fixed point, then asked all at once (ask_pending()).
  const auto known = remembered_predefined(*m_in.predefined, ask);
  for (const auto& id : ask) {
    if (!known.contains(id)) {
      m_pending.emplace(id, where);
    }
  }
  return apply_predefined(known, [&](const std::string&) { return where; });
}

bool ComputedIncludes::ask_pending() {
  std::vector<std::string> names;
  for (const auto& [name, where] : m_pending) {
    names.push_back(name);
  }
  auto answers = ask_predefined(*m_in.predefined, names);
  if (!answers) {
    m_not_cacheable = m_pending.begin()->second +
                      "cannot ask NVRTC which of its identifiers it predefines: " + answers.error().message;
    return false;
  }
  const auto pending = std::move(m_pending);
  m_pending.clear();
  return apply_predefined(*answers, [&](const std::string& name) { return pending.at(name); });
}

std::string ComputedIncludes::stopped_before_asking() const {
  return m_pending.begin()->second + "the scan stopped before asking NVRTC about " + m_pending.begin()->first;
}

}  // namespace kcache::jit
