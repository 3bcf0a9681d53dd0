// util/input_file.hpp: opening a file that a user named, to read it.
//
// Every reader of a path that comes from a user (a bundle, a key file, the
// config file, an input of `put`, `compile`, `link`, `stamp`, `inspect`,
// `why-miss`, a plan) opens it here, so that all of them keep the same rules
// and say the same thing:
// - A symlink is followed: the file it names is read, as every tool does
//   (`current.kcb -> v3.kcb`); a loop of symlinks is named as such.
// - Nothing blocks and nothing but a regular file is read: the path is
//   stat()ed first, so a FIFO, device, socket or directory is refused without
//   being opened; what is then opened is opened with O_NONBLOCK | O_NOCTTY and
//   checked again with fstat(), so a FIFO swapped in between cannot block the
//   reader either.
// - One message per case, naming `what` and the path (`not_found`,
//   `permission_denied` and `io` exit 1 in the kcache command):
//     not_found          "<what> <path> does not exist"
//     io                 "<what> <path> is a FIFO, not a regular file"
//                        (a directory, a device, a socket: likewise)
//     io                 "<what> <path> is a loop of symbolic links"
//     permission_denied  "cannot read <what> <path>: Permission denied"
//     invalid_argument   "<what> <path> is larger than N bytes" (read_input_file)
//     (any other errno)  "cannot read <what> <path>: <strerror>"
// Thread-safety: thread-safe (no shared state).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "kcache/error.hpp"
#include "util/fd.hpp"

namespace kcache::util {

// A regular file opened for reading, and its status at open.
struct InputFile {
  Fd fd;
  struct stat st {};
};

// Opens `path` for reading under the rules above. `what` names the file in
// messages ("bundle", "bundle public key", "input file"); empty: the path alone.
Result<InputFile> open_input_file(const std::filesystem::path& path, std::string_view what);

// Checks `path` under the rules above without keeping it open.
Result<void> check_input_file(const std::filesystem::path& path, std::string_view what);

// The whole content of `path` (open_input_file), refused with an
// `invalid_argument` error naming the bound when it holds more than `max_bytes`; the file is never read
// past `max_bytes + 1` bytes, whatever its size says (a file that grows while
// it is read).
Result<std::string> read_input_file(const std::filesystem::path& path, std::string_view what,
                                    std::uint64_t max_bytes);

// The words for a file type that is not a regular file: "a FIFO", "a
// directory", "a socket", "a device"; "a regular file" for one.
std::string_view file_type_words(mode_t mode) noexcept;

}  // namespace kcache::util
