// deps/base_dir.hpp: keys that two checkouts at different absolute paths
// share (the `base_dir` setting, KCACHE_BASE_DIR; private).
//
// An NVRTC key names paths as the request gives them: the program name,
// `--include-path` and `--pre-include` values, in-memory header names and the
// disk headers found. A build that passes absolute paths from
// /home/a/proj and /home/b/proj therefore never shares. With `base_dir` set
// (an absolute directory, the checkout root or a directory above it), every
// such path under it is keyed relative to it, and the key gains
// `base_dir = relative`.
//
// That is sound only where the output does not depend on those paths. It does
// (docs/keys.md) with LTO-IR, `--device-debug` and `--generate-line-info`
// (line tables and DWARF name the files), and wherever a user file expands
// `__FILE__` or `__BASE_FILE__`, calls `__builtin_FILE`, `source_location` or
// `assert` (each writes the file's path as a string). Then the key keeps the
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
#include <optional>
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

// Why NVRTC's output for this request names the files it reads, whatever
// they hold (ltoir, -G, -lineinfo); empty when it does not.
std::string paths_reach_output_because(const CompileRequest& request, const CanonicalOptions& options);

// The first of `__FILE__`, `__BASE_FILE__`, `__builtin_FILE`,
// `source_location`, `assert` that `text` holds as a whole identifier; empty when none.
std::string_view location_token(std::string_view text);

// Why the files of this request put their paths into the output (a token
// above, naming the file by `keyed` name), empty when none does. Reads each
// disk header and checks it against its digest; a header that changed since
// the scan is a reason too.
std::string files_name_their_location(const CompileRequest& request, const std::vector<HeaderDependency>& headers,
                                      const std::string& base);

// The remembered verdict for relative key `key_hex`: "relative", or
// "absolute: <why>"; nullopt when none. `memo_dir` empty: memory only.
std::optional<std::string> remembered_verdict(const std::string& key_hex, const std::filesystem::path& memo_dir);
void remember_verdict(const std::string& key_hex, const std::filesystem::path& memo_dir, const std::string& verdict);

// Whether `payload` holds `base` followed by '/' (raw bytes, or the decimal
// byte list PTX writes for a string constant).
bool output_names_base(std::string_view payload, const std::string& base);

}  // namespace kcache::jit
