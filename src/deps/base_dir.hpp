// deps/base_dir.hpp: keys that two checkouts at different absolute paths
// share (the `base_dir` setting, KCACHE_BASE_DIR; private).
//
// An NVRTC key names paths as the request gives them: the program name,
// `--include-path` and `--pre-include` values, in-memory header names and the
// disk headers found. A build that passes absolute paths from
// /home/a/proj and /home/b/proj therefore never shares. With `base_dir` set
// (an absolute directory, the checkout root or a directory above it), every
// such path under it is keyed relative to the working directory when that is
// under it too (base_dir_anchor(); /home above /home/a/proj and
// /home/bb/proj), else relative to base_dir, and the key gains
// `base_dir = relative`.
//
// That is sound only where the output does not depend on those paths. It does
// (docs/keys.md) with LTO-IR, `--device-debug` and `--generate-line-info`
// (line tables and DWARF name the files), and wherever a user file expands
// `__FILE__` or `__BASE_FILE__`, calls `__builtin_FILE`, `source_location` or
// `assert` (each writes the file's path as a string), through a line splice,
// a token paste or a toolkit macro too. Then the key keeps the
// absolute paths and gains `base_dir = absolute: <why>` (`kcache why-miss`
// shows it). Files are checked token by token (comments included: a false
// alarm only keeps a key absolute). The verdict depends only on the bytes the
// key already holds by digest, so it is remembered per relative key (in
// memory, and beside the header manifests as `<k0k1>/base-dir-<key>`,
// trimmed with them).
//
// As a last line, a compile keyed relative whose output holds the base
// directory's path anyway (raw, or as PTX's decimal byte lists) is not cached,
// and its relative key is remembered as `absolute` from then on.
//
// Thread-safety: every function here is thread-safe.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/compile_options.hpp"
#include "kcache/compile_request.hpp"
#include "kcache/compiler.hpp"

namespace kcache::jit {

// KCACHE_BASE_DIR, made absolute and lexically normal without a trailing
// slash; empty when unset, empty, relative or `/` (which would make every
// path relative).
std::string base_dir_setting();

// `path` relative to `base` when it is `base` or under it ("." for `base`
// itself), else `path` unchanged.
std::string relative_to_base(const std::string& path, const std::string& base);

// The directory paths under `base` are keyed relative to: the working
// directory (getcwd) when it is `base` or under it, so that `base_dir` set
// above every checkout (/home, with /home/a/proj and /home/bb/proj) shares
// between them as ccache's does; empty (relative to `base` itself) when the
// working directory is elsewhere or unreadable, or `base` is empty.
std::string base_dir_anchor(const std::string& base);

// How a key names `path`: unchanged when `base` is empty or `path` is not
// under it (relative paths are the request's own, resolved against the
// working directory by NVRTC too); else relative to `anchor`
// (`../inc/h.h`), or to `base` when `anchor` is empty.
std::string keyed_path(const std::string& path, const std::string& base, const std::string& anchor);

// Why NVRTC's output for this request names the files it reads, whatever
// they hold (ltoir, -G, -lineinfo); empty when it does not.
std::string paths_reach_output_because(const CompileRequest& request, const CanonicalOptions& options);

// The first of `__FILE__`, `__BASE_FILE__`, `__builtin_FILE`,
// `__builtin_source_location`, `source_location`, `assert` that `text` holds
// as a whole identifier, after trigraphs and line splices (`__FI\` newline
// `LE__` is `__FILE__`: deps/source_text.hpp); empty when none.
std::string_view location_token(std::string_view text);

// Whether `id` could be a piece of one of the names above formed by `##`
// (`CAT(__FI, LE__)`): a part of one at least two characters long, not the whole.
bool location_fragment(std::string_view id);

// Why the files of this request put their paths into the output, empty when
// none does: a token above in the source, an in-memory header or a disk
// header (naming the file by `keyed` name); a `##` in any of them together
// with an identifier in any of them that is a location_fragment(); an
// identifier that the toolkit defines as a macro reaching one of the names
// (`toolkit_macros`, ToolkitIncludes::location_macros(); null: not checked).
// Reads each disk header and checks it against its digest; a header that
// changed since the scan is a reason too.
std::string files_name_their_location(const CompileRequest& request, const std::vector<HeaderDependency>& headers,
                                      const std::string& base,
                                      const std::set<std::string, std::less<>>* toolkit_macros = nullptr);

// What a remembered verdict is about: base_dir's ("relative" or
// "absolute: <why>"), or whether a file names a relative `#line`
// (deps/working_directory.hpp; "none" or the directive).
enum class VerdictKind { base_dir, line_names };

// The remembered verdict for relative key `key_hex`: "relative", or
// "absolute: <why>"; nullopt when none. `memo_dir` empty: memory only.
// `kind` line_names: in `<k0k1>/line-names-<key>`.
std::optional<std::string> remembered_verdict(const std::string& key_hex, const std::filesystem::path& memo_dir,
                                              VerdictKind kind = VerdictKind::base_dir);
void remember_verdict(const std::string& key_hex, const std::filesystem::path& memo_dir, const std::string& verdict,
                      VerdictKind kind = VerdictKind::base_dir);

// Whether `payload` holds `base` followed by '/' (raw bytes, or the decimal
// byte list PTX writes for a string constant).
bool output_names_base(std::string_view payload, const std::string& base);

}  // namespace kcache::jit
