// plan/sidecar.hpp: `.sha256` sidecars in sha256sum format, and file hashing.
//
// Format (the one `sha256sum` writes and `sha256sum -c` reads), one line:
//
//   sidecar := HEX64 "  " file-name "\n"        HEX64 lowercase; " *" (binary mode) is also read
//
// `file-name` is the base name of the artifact, so `cd dir && sha256sum -c
// x.engine.sha256` works. A sidecar is at most 4 KiB.
//
// Thread-safety: free functions, thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "kcache/error.hpp"

namespace kcache::plan {

struct FileDigest {
  std::string sha256;  // 64 lowercase hex
  std::uint64_t size = 0;
};

// Hashes a regular file with SHA-256 (OpenSSL), without following a symlink.
// Returns not_found when it does not exist, io on read errors, invalid_argument
// when it is not a regular file.
Result<FileDigest> hash_file(const std::filesystem::path& path);

// Returns the sidecar line for `sha256` and `file_name`.
std::string sidecar_text(const std::string& sha256, const std::string& file_name);

// Reads the digest from the sidecar at `sidecar_path`, checking that it names
// `file_name`. Returns not_found when it is missing, corrupt when malformed.
Result<std::string> read_sidecar(const std::filesystem::path& sidecar_path, const std::string& file_name);

enum class SidecarState { ok, missing_file, missing_sidecar, bad_sidecar, mismatch };
std::string_view to_string(SidecarState state) noexcept;

struct SidecarCheck {
  SidecarState state = SidecarState::missing_file;
  FileDigest digest;          // of the file, when it was hashed
  std::string sidecar_sha256;  // from the sidecar, when it was read
};

// Checks `file` against `file` + ".sha256": reads the sidecar first, then
// hashes the file in full. Never fails: problems are states.
SidecarCheck check_sidecar(const std::filesystem::path& file);

// The sidecar path of `file`: the same name plus ".sha256".
std::filesystem::path sidecar_path(const std::filesystem::path& file);

}  // namespace kcache::plan
