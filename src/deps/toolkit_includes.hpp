// deps/toolkit_includes.hpp: the include names the toolkit's own headers
// use, and the macros they define (private).
//
// kcache does not scan headers under the toolkit root for a key: the toolkit
// fingerprint stands for them. But a toolkit header resolves its includes
// through the same search path as the user's code, so a user include
// directory that holds `cuda/std/type_traits` shadows the toolkit's copy for
// `<cooperative_groups.h>` too. To see such a header without scanning the
// toolkit on every compile, kcache lists once per toolkit the names each
// toolkit header includes (literal names, and every expansion of the computed
// ones: Thrust's `#include __THRUST_HOST_SYSTEM_..._HEADER`). A scan then
// follows, from the toolkit headers the user's files reach, the names they
// can reach inside the toolkit (reachable_names()), and checks each user
// directory for those names only (deps/header_scanner.hpp). The toolkit's
// #defines are kept too: a user's computed include may use a toolkit macro.
//
// Scanned: every regular file under `<root>/include` (symlinks to files
// followed, to directories not), at most k_max_toolkit_files files.
// Remembered per process and, when a memo directory is given, in
// `<memo dir>/toolkit-<digest of root and fingerprint>`: the per-user toolkit
// directory (`$XDG_CACHE_HOME/kcache-toolkit/`), else the cache directory's
// (deps/user_memo.hpp), so a new cache directory does not read the
// toolkit's ~2 000 headers again (format version 3: version 3 lists the names a computed include forms with a macro undefined too; strictly parsed, at most
// 64 MiB):
//   file  := "kcache-toolkit-includes 3\n" ("file " str "\n" ("name " str "\n")*)*
//            ("def " ("f"|"o") " " str " " str " " str "\n")* "end\n"
//   (a file is named by its canonical path)
//   str   := length ":" bytes
//
// Thread-safety: toolkit_includes() is thread-safe; the result is immutable.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <set>
#include <string>
#include <vector>

#include "deps/macro_expander.hpp"

namespace kcache::jit {

inline constexpr std::size_t k_max_toolkit_files = 200000;

struct ToolkitIncludes {
  // Canonical path of each toolkit header -> the names it includes.
  std::map<std::string, std::vector<std::string>, std::less<>> names_of;
  // Every #define of every toolkit header, as read; find_define() indexes
  // them on first use (most scans expand no computed include that needs one).
  std::vector<MacroDefinition> raw_defines;
  // The toolkit's definitions of `name`; null when it has none. Thread-safe.
  const std::vector<MacroDefinition>* find_define(std::string_view name) const;
  // The names of the toolkit's macros whose expansion can reach `__FILE__`,
  // `__BASE_FILE__`, `__builtin_FILE`, `__builtin_source_location`,
  // `source_location` or `assert` (`_CCCL_BUILTIN_FILE`): a body naming one,
  // or naming such a macro (deps/base_dir.hpp). Computed on first use from
  // raw_defines, lexically (every identifier of a body counts). Thread-safe.
  const std::set<std::string, std::less<>>& location_macros() const;
  // Takes `table` (raw_defines, each added in order) as the index
  // find_define() would build; a scan has built it already. No effect once indexed.
  void adopt_index(MacroTable table);

private:
  mutable std::once_flag m_indexed;
  mutable MacroTable m_defines;
  mutable std::once_flag m_located;
  mutable std::set<std::string, std::less<>> m_location_macros;
};

// Adds to `names` every name the toolkit headers in `entries` (canonical
// paths) can include, directly or through other toolkit headers, resolving
// each inside the toolkit through the includer's directory and
// `toolkit_dirs` (canonical); `visited` keeps the headers already followed
// (callers pass the same sets again to extend them). A name that resolves to
// no toolkit header is still listed.
void reachable_names(const ToolkitIncludes& toolkit, const std::vector<std::string>& entries,
                     const std::vector<std::string>& toolkit_dirs, std::set<std::string>& visited,
                     std::vector<std::string>& names, std::set<std::string>& seen_names);

// Called with a scan's result before its memo file is written.
using ToolkitReady = std::function<void(const std::shared_ptr<const ToolkitIncludes>&)>;

// The include names and macros of the toolkit at `root` (canonical), whose
// headers' fingerprint is `fingerprint`. Never fails: an unreadable file is
// skipped (its names are then not known; the toolkit is the user's own
// installation). `memo_dir` (per user) and `fallback_dir` (the cache
// directory's) both empty: remembered in this process only. Where the
// toolkit's headers were read (no usable memo file), `ready` (when set) gets
// the result before the memo file is written, and other threads take it from
// this process's memory meanwhile.
std::shared_ptr<const ToolkitIncludes> toolkit_includes(const std::filesystem::path& root,
                                                        const std::string& fingerprint,
                                                        const std::filesystem::path& memo_dir,
                                                        const std::filesystem::path& fallback_dir = {},
                                                        const ToolkitReady& ready = {});

// Whether calling toolkit_includes() for `root` and `fingerprint` (and the
// same memo directories) on a thread of its own is worth a thread: false when
// this process holds that toolkit already, another thread is reading a
// toolkit now (it may be this one), or the process has had one thread only
// and a memo file of that toolkit exists (reading it is not worth making
// every later stdio call lock: util/single_threaded.hpp); true where the
// toolkit's headers must be read. Never blocks. Thread-safe.
bool toolkit_includes_worth_prefetching(const std::filesystem::path& root, const std::string& fingerprint,
                                        const std::filesystem::path& memo_dir,
                                        const std::filesystem::path& fallback_dir = {});

// Forgets the toolkits scanned in this process (the memo files are read
// again on next use); for tests and benchmarks that act as a new process.
void forget_toolkit_includes();

}  // namespace kcache::jit
