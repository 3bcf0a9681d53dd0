// store/remote/team_key.hpp: the team key that signs remote entries.
//
// A team key is a secret of 32 or more bytes shared by everyone allowed to
// publish to a team's remote cache (docs/security.md). Writers sign every
// object they upload with HMAC-SHA256 under the signing key; readers accept an
// object only when it is signed by one of the keys they hold (the signing key
// and, during a rotation, older keys named in `remote_read_key_files`).
//
// Key file format: the file holds the key itself. `kcache remote keygen`
// writes 64 lowercase hex characters (32 random bytes) and a newline, mode
// 0600. When the content, without trailing whitespace, is only lowercase hex
// of even length >= 64, the key is the decoded bytes; otherwise the raw bytes
// of the file are the key and there must be at least 32 of them. A key file
// that other users can read (mode & 0007) is refused: chmod 600 it.
//
// Thread-safety: TeamKey is an immutable value; the functions are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "kcache/error.hpp"

namespace kcache::remote {

inline constexpr std::size_t k_team_key_min_bytes = 32;
inline constexpr std::size_t k_team_key_max_file_bytes = 4096;

struct TeamKey {
  std::string secret;                 // the key bytes (>= 32); never printed
  std::array<std::uint8_t, 8> id{};   // first 8 bytes of SHA-256("kcache-team-key-id\0" || secret)
  std::string source;                 // the file it came from, for messages

  // The id as 16 hex characters: printable, reveals nothing of the key.
  std::string id_hex() const;
};

// Builds a TeamKey from its bytes. Returns invalid_argument when shorter than
// k_team_key_min_bytes.
Result<TeamKey> make_team_key(std::string secret, std::string source = {});

// Reads a key file (see the format above), not following a symlink at its
// last component. Returns not_found / permission_denied / io when it cannot be
// read, invalid_argument when it is too short, too large, not a regular file
// or readable by other users; every message names `path` and says what to do.
Result<TeamKey> load_team_key(const std::filesystem::path& path);

// Writes a new random key to `path` (64 hex characters and a newline) with
// mode 0600, refusing to replace an existing file (invalid_argument naming
// it). Returns the key written. Uses getrandom(2).
Result<TeamKey> generate_team_key_file(const std::filesystem::path& path);

}  // namespace kcache::remote
