// cli/exit_codes.hpp: the exit codes of the kcache command (docs/cli.md lists them).
#pragma once

namespace kcache::cli {

inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_error = 1;        // the operation failed; the message says why
inline constexpr int k_exit_usage = 2;        // bad command line (CLI11 also uses this)
inline constexpr int k_exit_miss = 3;         // `get`/`show`: no entry for the key
inline constexpr int k_exit_corrupt = 4;      // `verify`: damaged entries were found
inline constexpr int k_exit_compile = 5;      // `compile`/`link`: the compiler rejected the input
inline constexpr int k_exit_toolkit = 6;      // a CUDA library is missing or too old
inline constexpr int k_exit_build = 7;        // `plan build`: an entry failed to build
inline constexpr int k_exit_untrusted = 8;    // `bundle verify`/`install`: unsigned, or signed by an untrusted key

}  // namespace kcache::cli
