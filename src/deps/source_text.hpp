// deps/source_text.hpp: a file's text after translation phases 1 and 2
// (trigraphs, line splices), for the lexical checks that look for a token or
// a directive (private).
//
// The directive scanner joins splices as it lexes; the other checks
// (deps/base_dir.hpp, deps/working_directory.hpp) search raw bytes, where
// `__FI\` newline `LE__` or `??=line` would hide what the compiler sees.
// Each function returns its input's text unchanged (and costs one search)
// when there is nothing to translate.
//
// Trigraphs: NVRTC 13.0 replaces them with -std=c++03, c++11 and c++14 only
// (its default, c++17 and c++20 warn "support for trigraphs is disabled";
// measured). The scans take both readings of a file that holds one, whatever
// -std says, so a key holds what either reading includes.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace kcache::jit {

// Whether `text` holds a trigraph (`??` followed by one of `=/'()!<>-`).
bool has_trigraph(std::string_view text);

// `text` with every trigraph replaced by the character it stands for.
std::string translate_trigraphs(std::string_view text);

// `text` with trigraphs translated and every backslash-newline (a backslash,
// optional blanks, then a newline, as GCC and EDG take it) removed.
std::string joined_text(std::string_view text);

}  // namespace kcache::jit
