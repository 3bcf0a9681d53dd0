// nvcc/dependency_file.hpp: the dependency file nvcc writes with -MD
// (private).
//
// nvcc 13 writes make syntax, one rule, then with -MP one empty rule per
// header:
//   target " : " source " \\\n" ("    " header " \\\n")* "    " header "\n"
//   ("\n" header ":\n")*                                     (-MP)
// (the target is the -MT value, else the output as given). nvcc builds it
// from the line markers of its host and device preprocessing, so it names
// every file either side read (device-only headers under `__CUDA_ARCH__`,
// every -gencode's), each once, in the order first read; paths are spelled
// as the preprocessor opened them (`dev.h`, `/usr/local/cuda/bin/../targets/
// ...`). Escapes: a backslash before a space or '#', `$$` for `$`.
//
// Thread-safety: functions without shared state.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::nvcc {

struct DependencyList {
  std::vector<std::string> targets;        // before the first colon
  std::vector<std::string> prerequisites;  // of the first rule, in order (the source first)
};

// Parses the first rule of `text`; nullopt when it holds no rule (no
// unescaped ':' followed by whitespace or the end).
std::optional<DependencyList> parse_dependency_file(std::string_view text);

}  // namespace kcache::nvcc
