// compile/name_evidence.hpp: the program name's directory left out of an
// NVRTC key by evidence (private; docs/keys.md, "The program name").
//
// Where the static rules cannot tell whether the directory reaches the
// output (deps/name_directory.hpp, `may_matter`: CCCL's
// `source_location::current(const char* = __builtin_FILE())`, toolkit headers
// that are not scanned, token pasting), derive() keys the request with the
// name's basename and `name_directory = left out (same output under another
// directory)`: the evidence key. It is looked up first. A compile that misses
// it compiles the request as named, then once more under probe_name(): the
// same basename in a directory of another length whose characters differ
// from the name's at every position. Only when both give the same bytes (the
// output, the lowered names, and the log once the names are swapped) is the
// result stored under the evidence key; otherwise it is stored under the key
// with the directory, and the verdict is remembered (in memory, and beside
// the header manifests as `<k0k1>/name-dir-<evidence key>`), so later
// derivations key the directory straight away. An entry under an evidence key
// is therefore only ever one whose output did not change with the directory.
//
// Residual: an output that depends on the directory in a way both names give
// the same answer to (a test of a character the name and the probe share,
// such as a position past both lengths) is not seen.
//
// Thread-safety: every function here is thread-safe.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kcache/compile_request.hpp"
#include "kcache/key_builder.hpp"

namespace kcache::jit {

// The `name_directory` value of an evidence key.
inline constexpr std::string_view k_left_out_by_evidence = "left out (same output under another directory)";

// Whether `record` is an evidence key: a result may be stored under it only
// once the probe compile agreed (see above).
bool left_out_by_evidence(const KeyRecord& record);

// A program name with `name`'s basename in another directory: longer than
// `name`'s directory, differing from `name` at every position before its
// basename. Never names an existing file in practice (a relative name of
// `k`/`q` characters).
std::string probe_name(std::string_view name);

// Whether `name` lies in a temporary directory (under an absolute $TMPDIR,
// /tmp, /var/tmp or /dev/shm): where a JIT library names each program after a
// fresh temporary file (CuPy), so that sharing across directories pays for the
// probe compile. Elsewhere a name with a directory names a file that stays
// where it is (a checkout), and a "may matter" request keys its directory
// with no probe: a cold compile costs one compile, not two.
bool in_temporary_directory(std::string_view name);

// Whether two logs are the same once `probe` is replaced by `name` in `probe_log`.
bool same_log(std::string_view log, std::string_view probe_log, std::string_view name, std::string_view probe);

// Whether the evidence key `evidence_hex` was found to depend on the
// directory (remembered in memory, else under `memo_dir`; none when empty).
bool name_directory_matters_remembered(const std::string& evidence_hex, const std::filesystem::path& memo_dir);
// Remembers that it does.
void remember_name_directory_matters(const std::string& evidence_hex, const std::filesystem::path& memo_dir);

// Remembers it for `request`, whose derivation gave an evidence key (the
// interposer's: its probe compile disagreed). Derivations remembered in this
// process are dropped, so the next one keys the directory.
void name_directory_matters_for(const CompileRequest& request);

}  // namespace kcache::jit
