// util/edit_distance.hpp: Levenshtein distance, for "did you mean" hints.
#pragma once

#include <cstddef>
#include <string_view>

namespace kcache::util {

// Returns the number of single-character insertions, deletions and
// substitutions that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kcache::util
