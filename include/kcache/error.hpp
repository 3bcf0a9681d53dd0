// kcache/error.hpp: the error value returned by every fallible kcache call.
//
// No exception crosses the public API. A call that can fail returns
// `kcache::Result<T>` (a `tl::expected<T, kcache::Error>`); a cache miss is a
// value (`std::optional`), never an error.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace kcache {

// What went wrong, in words a caller can branch on. Stable: the numeric
// values appear in logs and JSON output.
enum class ErrorCode : int {
  invalid_argument = 1,   // the caller passed something malformed (a bad key, an unknown option)
  not_found = 2,          // a named thing that must exist does not (a file, an entry for `show`)
  corrupt = 3,            // bytes failed a check (magic, version, size, digest, strict parse)
  io = 4,                 // an operating-system call failed (EIO, ENOENT on a path we own, ...)
  no_space = 5,           // ENOSPC or EDQUOT
  permission_denied = 6,  // EACCES or EPERM, or a cache root owned by another user
  read_only = 7,          // EROFS, or a store opened read-only
  unsupported = 8,        // a feature, option or format this build or version does not handle
  timeout = 9,            // a bounded wait ran out
  compile_failed = 10,    // the compiler rejected the input; `Error::log` holds its log
  toolkit_missing = 11,   // a CUDA library could not be loaded or is too old
  worker_crashed = 12,    // a worker process died or spoke garbage
  busy = 13,              // a lock or resource is held elsewhere
  internal = 14,          // a broken invariant inside kcache: a bug, please report it
};

// Returns the snake_case name of `code` ("no_space"), or "unknown".
std::string_view to_string(ErrorCode code) noexcept;

// An error: a code, a one-line message that says what to do, and, for
// compiles, the compiler's log.
struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
  std::string log;

  // Returns "<code>: <message>".
  std::string describe() const;
};

template <class T>
using Result = tl::expected<T, Error>;

// Builds the unexpected half of a Result: `return make_error(ErrorCode::io, "...")`.
inline tl::unexpected<Error> make_error(ErrorCode code, std::string message, std::string log = {}) {
  return tl::unexpected<Error>(Error{code, std::move(message), std::move(log)});
}

// Maps an errno value to the closest ErrorCode (ENOSPC -> no_space, EACCES -> permission_denied ...).
ErrorCode error_code_from_errno(int err) noexcept;

// Builds an error from `errno`-style `err`: "<what>: <strerror(err)>".
tl::unexpected<Error> make_errno_error(int err, std::string_view what);

}  // namespace kcache
