// cli/output_file.hpp: where a command's results go: the -o file of `get`,
// `compile` and `link`, and standard output. Standalone (no other cli header)
// so both output.hpp and compile_cli_support.hpp users can include it.
#pragma once

#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::cli {

// The hint printed under a failed output write: it is the output, not the cache.
inline constexpr std::string_view k_output_write_hint =
    "the cache is not affected; check the output (free space, permissions, that its directory exists), "
    "or pick another with -o";

// Writes `bytes` to the output the user named with -o (docs/cli.md, "Output
// files"): "-" is standard output; a regular file or a missing path is
// replaced atomically (util::write_output_file: a file that already holds
// the bytes is only touched); a symlink is followed and its target written
// in place; a device, FIFO or socket is written in place. On failure the
// error names the output ("cannot write FILE: No space left on device").
// Thread-safety: not thread-safe for "-" (standard output is shared).
Result<void> write_output(const std::string& path, std::string_view bytes);

// Writes all of `bytes` to standard output (after flushing stdio's buffer).
// On failure: an io-type error naming standard output and the errno text.
Result<void> write_to_stdout(std::string_view bytes);

// Checks that `path` names something kcache can read as an input file:
// it exists and (after following symlinks) is a regular file. A directory,
// FIFO, device or socket is refused without opening it (opening a FIFO would
// block). Errors name `path`: not_found "FILE does not exist", io "FILE is a
// directory, not a file", io "FILE is a FIFO, not a regular file" (all exit 1).
Result<void> check_input_file(const std::string& path);

// Called once before a command runs: makes sure descriptors 0, 1 and 2 are
// open (a closed one is opened on /dev/null with the wrong direction, so a
// write to a closed stdout fails instead of landing in a file kcache opened
// later), and makes a write to a pipe without a reader fail with EPIPE
// instead of killing the process silently (a handler, not SIG_IGN, so
// children get the default back at exec).
void prepare_standard_streams(bool handle_sigpipe);

// Called once after a command ran: flushes standard output and returns false
// (after printing an error naming standard output) when anything written to
// it was lost.
bool finish_standard_output();

}  // namespace kcache::cli
