// passport/failed_compile.hpp: the entry of a compile that failed
// deterministically (a negative entry, docs/keys.md "Failed compiles").
//
// A compile the compiler rejected (NVRTC's NVRTC_ERROR_COMPILATION: an error
// in the source, a missing header, jitify's `#include
// <__JITIFY_STOP_COMPILATION>`) gives the same error and log every time its
// inputs are the same. kcache keeps it under the key a success would have had,
// as an entry of kind `failed-compile`, so that the next request gets the
// error back without compiling. The payload (format version 1, docs/
// artifact-format.md) holds what the caller got:
//
//   failed  := "KCFAIL01" u32 code u64 len message u64 len log
//
// Integers are little-endian; `code` is the kcache::ErrorCode of the error
// (only compile_failed is ever written or accepted); the message and the log
// are at most 4 MiB each. The passport's `log` is the same log (truncated
// as every passport log is), its key record the request's (whose
// `target_kind` is the kind a success would have had), its `symbols` empty.
//
// The payload is checked against the passport's digest like any entry's; an
// entry whose payload does not decode is no negative entry and is never
// served, neither as a failure nor as a success (its kind is not the one the
// request asked for).
//
// Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <string_view>

#include "kcache/artifact.hpp"
#include "kcache/error.hpp"
#include "kcache/key_builder.hpp"

namespace kcache {

// The kind of a negative entry.
inline constexpr std::string_view k_failed_compile_kind = "failed-compile";

// True when `passport` is one of a negative entry (its kind).
bool is_failed_compile(const Passport& passport) noexcept;

// True when `payload` begins as a negative entry's does (its magic): such a
// payload is never served as a success, whatever its passport's kind says.
bool holds_failed_compile(std::string_view payload) noexcept;

// The negative entry of `key` for the compile that ended in `error` (REQUIRES:
// error.code == compile_failed), made by `producer` for `target` after
// `compile_us` microseconds.
Artifact make_failed_compile(const KeyBuilder& key, const Error& error, Producer producer, Target target,
                             std::uint64_t compile_us);

// The error a negative entry holds: the code, message and log the compile
// ended in. `corrupt` naming what is wrong when `artifact` is no negative entry
// or its payload does not decode (wrong magic, a code other than
// compile_failed, a length past the payload or the limits, bytes left over).
Result<Error> failed_compile_error(const Artifact& artifact);

// `artifact` itself, or, for a negative entry, the error it holds (or
// `corrupt` when it does not decode): what a caller that wants a compiled
// artifact must get.
Result<Artifact> served_or_failed(Artifact artifact);

}  // namespace kcache
