// deps/memo_writer.hpp: the writers' side of the memo files' shared
// grammar (header manifests, the toolkit's include names; the reader is
// deps/memo_reader.hpp) (private).
//
//   num    := canonical decimal
//   str    := num ":" bytes          (num: the number of bytes)
//   define := "def " ("f" | "o") " " str " " str " " str "\n"   (name, params, body)
//
// Each appends to `out` with no temporary string: a manifest of a large tree
// is written with tens of thousands of fields.
//
// Thread-safety: no state.
#pragma once

#include <charconv>
#include <string>
#include <string_view>

#include "deps/directive_scanner.hpp"

namespace kcache::jit {

template <typename N>
void put_num(std::string& out, N n) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, n).ptr);
}

inline void put_str(std::string& out, std::string_view s) {
  put_num(out, s.size());
  out += ':';
  out += s;
}

inline void put_define(std::string& out, const MacroDefinition& d) {
  out += d.function_like ? "def f " : "def o ";
  put_str(out, d.name);
  out += ' ';
  put_str(out, d.params);
  out += ' ';
  put_str(out, d.body);
  out += '\n';
}

}  // namespace kcache::jit
