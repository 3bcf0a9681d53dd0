// deps/user_memo.hpp: memo files kept per user, with the cache directory as
// a fallback (private).
//
// What depends only on the toolkit (what NVRTC predefines per context, the
// include names and macros of the toolkit's headers) or only on a file's stat
// identity (directory listings) is the same for every cache directory of a
// user. It is kept beside the per-user toolkit memo
// (`$XDG_CACHE_HOME/kcache-toolkit/`, deps/toolkit_memo.hpp), so that a new
// cache directory on a machine that used this toolkit before pays for none of
// it again. Where that directory cannot be written (a HOME this user may not
// write), the file goes to the cache directory's memo directory instead, as it
// did before; a read tries the per-user directory first, then that one.
//
// Each file is untrusted: opened without following a symlink, at most
// `max_bytes`, and parsed strictly by its owner (a damaged file is ignored and
// replaced at the next write). Writes are atomic (temporary file and rename),
// mode 0600, best effort.
//
// Thread-safety: the functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kcache::jit {

struct MemoPlaces {
  std::filesystem::path user;      // per user; empty: none
  std::filesystem::path fallback;  // the cache directory's memo directory; empty: none

  bool empty() const noexcept { return user.empty() && fallback.empty(); }
};

// The bytes of `name` in the first of `places` that holds a regular file no
// bigger than `max_bytes`; nullopt when none does (missing, too big, a
// symlink, unreadable).
std::optional<std::string> read_memo_file(const MemoPlaces& places, std::string_view name, std::size_t max_bytes);

// Writes `text` as `name` into the user's directory (created when missing),
// or into the fallback when that fails. False when neither could be written.
bool write_memo_file(const MemoPlaces& places, std::string_view name, std::string_view text);

}  // namespace kcache::jit
