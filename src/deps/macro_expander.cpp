#include "deps/macro_expander.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>

namespace kcache::jit {

namespace {

enum class TokKind { ident, number, literal, punct };

struct Tok {
  TokKind kind = TokKind::punct;
  std::string text;
  bool space_before = false;
  std::vector<std::string> hide;  // macros this token may not expand (sorted)

  bool is(std::string_view p) const { return kind == TokKind::punct && text == p; }
};

using Seq = std::vector<Tok>;

bool ident_start(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' || u == '$' || u >= 0x80;
}

bool ident_char(char c) {
  return ident_start(c) || (c >= '0' && c <= '9');
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n';
}

// Splits `s` into preprocessing tokens (comments are already blanks).
Seq lex(std::string_view s) {
  Seq out;
  std::size_t i = 0;
  bool space = false;
  while (i < s.size()) {
    const char c = s[i];
    if (blank(c)) {
      space = true;
      ++i;
      continue;
    }
    Tok t;
    t.space_before = space;
    space = false;
    const std::size_t start = i;
    if (ident_start(c)) {
      while (i < s.size() && ident_char(s[i])) {
        ++i;
      }
      // An encoding prefix glued to a literal (u8"x", L'x') is part of it.
      if (i < s.size() && (s[i] == '"' || s[i] == '\'')) {
        const char q = s[i++];
        while (i < s.size() && s[i] != q) {
          i += s[i] == '\\' ? 2 : 1;
        }
        i = std::min(i + 1, s.size());
        t.kind = TokKind::literal;
      } else {
        t.kind = TokKind::ident;
      }
    } else if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9')) {
      ++i;
      while (i < s.size()) {
        const char d = s[i];
        if ((d == '+' || d == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p' || s[i - 1] == 'P')) {
          ++i;
        } else if (ident_char(d) || d == '.' || d == '\'') {
          ++i;
        } else {
          break;
        }
      }
      t.kind = TokKind::number;
    } else if (c == '"' || c == '\'') {
      ++i;
      while (i < s.size() && s[i] != c) {
        i += s[i] == '\\' ? 2 : 1;
      }
      i = std::min(i + 1, s.size());
      t.kind = TokKind::literal;
    } else if (c == '#' && i + 1 < s.size() && s[i + 1] == '#') {
      i += 2;
    } else if (c == '.' && s.substr(i, 3) == "...") {
      i += 3;
    } else {
      ++i;
    }
    t.text = std::string(s.substr(start, i - start));
    out.push_back(std::move(t));
  }
  return out;
}

bool hidden(const Tok& t, const std::string& name) {
  return std::binary_search(t.hide.begin(), t.hide.end(), name);
}

void hide_add(Seq& seq, const std::vector<std::string>& hs) {
  for (auto& t : seq) {
    std::vector<std::string> merged;
    std::set_union(t.hide.begin(), t.hide.end(), hs.begin(), hs.end(), std::back_inserter(merged));
    t.hide = std::move(merged);
  }
}

std::string spell(const Seq& seq, std::size_t from, std::size_t to) {
  std::string s;
  for (std::size_t i = from; i < to; ++i) {
    if (i != from && seq[i].space_before) {
      s += ' ';
    }
    s += seq[i].text;
  }
  return s;
}

Tok stringize(const Seq& arg) {
  std::string s = "\"";
  for (std::size_t i = 0; i < arg.size(); ++i) {
    if (i != 0 && arg[i].space_before) {
      s += ' ';
    }
    for (const char c : arg[i].text) {
      if (arg[i].kind == TokKind::literal && (c == '"' || c == '\\')) {
        s += '\\';
      }
      s += c;
    }
  }
  s += '"';
  Tok t;
  t.kind = TokKind::literal;
  t.text = std::move(s);
  return t;
}

struct Params {
  std::vector<std::string> names;
  bool variadic = false;  // the last name takes the rest (__VA_ARGS__ or `name...`)
};

std::optional<Params> parse_params(std::string_view text) {
  Params p;
  const Seq toks = lex(text);
  bool want_name = true;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const Tok& t = toks[i];
    if (want_name) {
      if (t.is("...")) {
        p.names.emplace_back("__VA_ARGS__");
        p.variadic = true;
      } else if (t.kind == TokKind::ident) {
        p.names.push_back(t.text);
        if (i + 1 < toks.size() && toks[i + 1].is("...")) {
          p.variadic = true;
          ++i;
        }
      } else {
        return std::nullopt;
      }
      want_name = false;
    } else if (t.is(",") && !p.variadic) {
      want_name = true;
    } else {
      return std::nullopt;
    }
  }
  if (want_name && !p.names.empty()) {
    return std::nullopt;  // a trailing comma
  }
  return p;
}

class Expander {
public:
  explicit Expander(const MacroTable& table) : m_table(table) {}

  // Every full expansion of `in`, or nothing when the bounds were hit (m_error says which).
  std::optional<std::vector<Seq>> expand(Seq in) {
    std::vector<Seq> results;
    // Per call (an argument's pre-expansion is a call of its own).
    std::set<std::string> states_seen;
    std::set<std::string> results_seen;
    // A state: tokens already final, and tokens still to scan.
    std::deque<std::pair<Seq, Seq>> work;
    work.emplace_back(Seq{}, std::move(in));
    while (!work.empty()) {
      auto [done, rest] = std::move(work.front());
      work.pop_front();
      std::size_t i = 0;
      bool expanded = false;
      for (; i < rest.size(); ++i) {
        const Tok& t = rest[i];
        if (t.kind != TokKind::ident || hidden(t, t.text)) {
          continue;
        }
        m_looked_up.insert(t.text);
        const auto* defs = m_table.find(t.text);
        if (defs == nullptr) {
          continue;
        }
        std::vector<std::pair<Seq, std::size_t>> replacements;
        if (!invoke(rest, i, *defs, replacements)) {
          if (!m_error.empty()) {
            return std::nullopt;
          }
          continue;  // a function-like macro name without arguments: not an invocation
        }
        // The name may also be undefined where the #include is (defined
        // after it, #undef'd before it, -U, or only in a branch not taken):
        // then it stays as written, and the tokens after it are scanned on.
        {
          Seq undefined_done = done;
          undefined_done.insert(undefined_done.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(i + 1));
          Seq undefined_rest(rest.begin() + static_cast<std::ptrdiff_t>(i + 1), rest.end());
          push(work, states_seen, std::move(undefined_done), std::move(undefined_rest));
        }
        Seq head(std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.begin() + static_cast<std::ptrdiff_t>(i)));
        for (auto& [r, consumed] : replacements) {
          Seq next_done = done;
          next_done.insert(next_done.end(), head.begin(), head.end());
          Seq next_rest = std::move(r);
          if (!next_rest.empty() && i < rest.size()) {
            next_rest.front().space_before = next_rest.front().space_before || rest[i].space_before;
          }
          next_rest.insert(next_rest.end(), rest.begin() + static_cast<std::ptrdiff_t>(i + consumed), rest.end());
          push(work, states_seen, std::move(next_done), std::move(next_rest));
        }
        expanded = true;
        break;
      }
      if (!expanded) {
        done.insert(done.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
        if (results_seen.insert(state_text(done, {})).second) {
          results.push_back(std::move(done));
        }
      }
      if (results.size() + work.size() > k_max_alternatives) {
        m_error = "more than " + std::to_string(k_max_alternatives) + " possible expansions";
        return std::nullopt;
      }
    }
    return results;
  }

  const std::string& error() const { return m_error; }
  const std::set<std::string>& looked_up() const { return m_looked_up; }

private:
  // A state's tokens with their hide sets (two states that spell the same
  // expand alike): alternatives reached twice are kept once, so the bound
  // counts distinct expansions.
  static std::string state_text(const Seq& done, const Seq& rest) {
    std::string s;
    for (const Seq* seq : {&done, &rest}) {
      for (const auto& t : *seq) {
        s += t.space_before ? " " : "";
        s += t.text;
        for (const auto& h : t.hide) {
          s += '\x01' + h;
        }
        s += '\x02';
      }
      s += '\x03';
    }
    return s;
  }

  static void push(std::deque<std::pair<Seq, Seq>>& work, std::set<std::string>& seen, Seq done, Seq rest) {
    if (seen.insert(state_text(done, rest)).second) {
      work.emplace_back(std::move(done), std::move(rest));
    }
  }

  // Expands the macro named at rest[at] with each of its definitions. Returns
  // false when it is not invoked there (a function-like name without `(`) or
  // on an error (m_error set). Each result comes with the number of tokens
  // of `rest` it replaces (1 for an object-like definition, the name and its
  // arguments for a function-like one).
  bool invoke(const Seq& rest, std::size_t at, const std::vector<MacroDefinition>& defs,
              std::vector<std::pair<Seq, std::size_t>>& out) {
    const Tok& name = rest[at];
    if (++m_steps > k_max_steps) {
      m_error = "more than " + std::to_string(k_max_steps) + " macro expansions";
      return false;
    }
    // Arguments, when the next token opens them (read once for all function-like definitions).
    std::optional<std::vector<Seq>> args;
    std::size_t args_end = 0;  // index after the closing parenthesis
    std::vector<std::string> paren_hide;
    if (at + 1 < rest.size() && rest[at + 1].is("(")) {
      std::vector<Seq> a(1);
      int depth = 0;
      std::size_t j = at + 2;
      for (; j < rest.size(); ++j) {
        const Tok& t = rest[j];
        if (t.is("(")) {
          ++depth;
        } else if (t.is(")")) {
          if (depth == 0) {
            break;
          }
          --depth;
        } else if (t.is(",") && depth == 0) {
          a.emplace_back();
          continue;
        }
        a.back().push_back(t);
      }
      if (j < rest.size()) {
        args = std::move(a);
        args_end = j + 1;
        paren_hide = rest[j].hide;
      }
    }
    bool any = false;
    for (const auto& def : defs) {
      if (!def.function_like) {
        Seq body = lex(def.body);
        std::vector<std::string> hs = name.hide;
        hs.insert(std::upper_bound(hs.begin(), hs.end(), name.text), name.text);
        hide_add(body, hs);
        out.emplace_back(std::move(body), 1);
        any = true;
        continue;
      }
      if (!args) {
        continue;
      }
      const auto params = parse_params(def.params);
      if (!params) {
        continue;  // a malformed definition: the compiler rejects it where it is used
      }
      std::vector<Seq> a = *args;
      if (params->variadic && a.size() > params->names.size()) {
        // The variadic parameter takes the rest, commas included.
        Seq& last = a[params->names.size() - 1];
        for (std::size_t k = params->names.size(); k < a.size(); ++k) {
          Tok comma;
          comma.text = ",";
          last.push_back(comma);
          last.insert(last.end(), a[k].begin(), a[k].end());
        }
        a.resize(params->names.size());
      }
      if (params->names.empty() && a.size() == 1 && a[0].empty()) {
        a.clear();
      }
      if (params->variadic && a.size() + 1 == params->names.size()) {
        a.emplace_back();
      }
      if (a.size() != params->names.size()) {
        continue;  // wrong argument count: an error where the compiler meets it
      }
      std::vector<std::string> hs;
      std::set_intersection(name.hide.begin(), name.hide.end(), paren_hide.begin(), paren_hide.end(),
                            std::back_inserter(hs));
      hs.insert(std::upper_bound(hs.begin(), hs.end(), name.text), name.text);
      std::vector<Seq> results;
      if (!substitute(lex(def.body), *params, a, hs, results)) {
        return false;
      }
      for (auto& r : results) {
        out.emplace_back(std::move(r), args_end - at);
      }
      any = true;
    }
    return any;
  }

  // Replaces the parameters of `body` with `args` (every combination of the
  // arguments' expansions) and appends each result to `out`.
  bool substitute(const Seq& body, const Params& params, const std::vector<Seq>& args,
                  const std::vector<std::string>& hs, std::vector<Seq>& out) {
    auto param_index = [&](const Tok& t) -> int {
      if (t.kind != TokKind::ident) {
        return -1;
      }
      for (std::size_t k = 0; k < params.names.size(); ++k) {
        if (params.names[k] == t.text) {
          return static_cast<int>(k);
        }
      }
      return -1;
    };
    // The expansions of each argument used outside # and ##, computed once.
    std::vector<std::optional<std::vector<Seq>>> expanded(args.size());
    std::vector<Seq> partial(1);
    for (std::size_t i = 0; i < body.size(); ++i) {
      const Tok& t = body[i];
      if (t.is("#") && i + 1 < body.size() && param_index(body[i + 1]) >= 0) {
        Tok s = stringize(args[static_cast<std::size_t>(param_index(body[i + 1]))]);
        s.space_before = t.space_before;
        for (auto& p : partial) {
          p.push_back(s);
        }
        ++i;
        continue;
      }
      if (t.is("##") && i + 1 < body.size()) {
        const Tok& rhs_tok = body[i + 1];
        const int rp = param_index(rhs_tok);
        const Seq rhs = rp >= 0 ? args[static_cast<std::size_t>(rp)] : Seq{rhs_tok};
        for (auto& p : partial) {
          if (p.empty() || rhs.empty()) {
            p.insert(p.end(), rhs.begin(), rhs.end());
            continue;
          }
          Tok left = p.back();
          p.pop_back();
          Seq pasted = lex(left.text + rhs.front().text);
          if (!pasted.empty()) {
            pasted.front().space_before = left.space_before;
          }
          p.insert(p.end(), pasted.begin(), pasted.end());
          p.insert(p.end(), rhs.begin() + 1, rhs.end());
        }
        ++i;
        continue;
      }
      const int pi = param_index(t);
      if (pi < 0) {
        for (auto& p : partial) {
          p.push_back(t);
        }
        continue;
      }
      const auto k = static_cast<std::size_t>(pi);
      if (i + 1 < body.size() && body[i + 1].is("##")) {
        for (auto& p : partial) {  // an operand of ## is not expanded
          p.insert(p.end(), args[k].begin(), args[k].end());
        }
        continue;
      }
      if (!expanded[k]) {
        auto e = expand(args[k]);
        if (!e) {
          return false;
        }
        expanded[k] = std::move(*e);
      }
      std::vector<Seq> next;
      for (const auto& p : partial) {
        for (const auto& e : *expanded[k]) {
          Seq s = p;
          const std::size_t at = s.size();
          s.insert(s.end(), e.begin(), e.end());
          if (at < s.size()) {
            s[at].space_before = t.space_before;
          }
          next.push_back(std::move(s));
        }
      }
      if (next.size() > k_max_alternatives) {
        m_error = "more than " + std::to_string(k_max_alternatives) + " possible expansions";
        return false;
      }
      partial = std::move(next);
    }
    for (auto& p : partial) {
      hide_add(p, hs);
      out.push_back(std::move(p));
    }
    return true;
  }

  const MacroTable& m_table;
  std::size_t m_steps = 0;
  std::string m_error;
  std::set<std::string> m_looked_up;
};

// The header name a fully expanded directive forms, if any.
std::optional<IncludeDirective> header_name(const Seq& seq) {
  if (seq.empty()) {
    return std::nullopt;
  }
  const Tok& first = seq.front();
  if (first.kind == TokKind::literal && first.text.size() >= 3 && first.text.front() == '"' &&
      first.text.back() == '"') {
    return IncludeDirective{first.text.substr(1, first.text.size() - 2), false, false};
  }
  if (first.is("<")) {
    for (std::size_t i = 1; i < seq.size(); ++i) {
      if (seq[i].is(">")) {
        std::string name = spell(seq, 1, i);
        if (i > 1 && seq[1].space_before) {
          name.insert(name.begin(), ' ');
        }
        if (name.empty()) {
          return std::nullopt;
        }
        return IncludeDirective{std::move(name), true, false};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

bool MacroTable::add(const MacroDefinition& d) {
  auto it = m_defs.find(std::string_view(d.name));
  if (it == m_defs.end()) {
    it = m_defs.emplace(d.name, std::vector<MacroDefinition>{}).first;
  }
  auto& v = it->second;
  if (std::find(v.begin(), v.end(), d) != v.end()) {
    return false;
  }
  v.push_back(d);
  return true;
}

void MacroTable::add_command_line(std::string_view definition) {
  MacroDefinition d;
  const auto eq = definition.find('=');
  std::string_view head = definition.substr(0, eq);
  d.body = eq == std::string_view::npos ? "1" : std::string(definition.substr(eq + 1));
  if (const auto open = head.find('('); open != std::string_view::npos && head.back() == ')') {
    d.function_like = true;
    d.params = std::string(head.substr(open + 1, head.size() - open - 2));
    head = head.substr(0, open);
  }
  d.name = std::string(head);
  if (!d.name.empty()) {
    add(d);
  }
}

const std::vector<MacroDefinition>* MacroTable::find(std::string_view name) const {
  if (const auto it = m_defs.find(name); it != m_defs.end()) {
    return &it->second;
  }
  return fallback ? fallback(name) : nullptr;
}

Expansion expand_include(std::string_view tokens, const MacroTable& table) {
  Expansion out;
  Expander e(table);
  const auto results = e.expand(lex(tokens));
  out.identifiers.assign(e.looked_up().begin(), e.looked_up().end());
  if (!results) {
    out.error = e.error();
    return out;
  }
  for (const auto& seq : *results) {
    if (auto h = header_name(seq); h && std::find(out.names.begin(), out.names.end(), *h) == out.names.end()) {
      out.names.push_back(std::move(*h));
    }
  }
  return out;
}

}  // namespace kcache::jit
