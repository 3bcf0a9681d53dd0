// `.sha256` sidecars and streaming SHA-256 of files (see plan/sidecar.hpp).
#include "plan/sidecar.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::plan {

namespace {
constexpr std::size_t k_chunk = std::size_t{1} << 20;
constexpr std::size_t k_sidecar_max = 4096;
}  // namespace

Result<FileDigest> hash_file(const std::filesystem::path& path) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));  // a FIFO never blocks
  if (!fd) {
    const int err = errno;
    if (err == ENOENT) {
      return make_error(ErrorCode::not_found, path.string() + " does not exist");
    }
    return make_errno_error(err, "open " + path.string());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return make_errno_error(errno, "stat " + path.string());
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::invalid_argument, path.string() + " is not a regular file");
  }
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  auto buffer = std::make_unique_for_overwrite<char[]>(k_chunk);
  util::Sha256 sha;
  FileDigest out;
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer.get(), k_chunk);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return make_errno_error(errno, "read " + path.string());
    }
    if (n == 0) {
      break;
    }
    sha.update(buffer.get(), static_cast<std::size_t>(n));
    out.size += static_cast<std::uint64_t>(n);
  }
  const auto digest = sha.finish();
  out.sha256 = util::to_hex(digest.data(), digest.size());
  return out;
}

std::string sidecar_text(const std::string& sha256, const std::string& file_name) {
  return sha256 + "  " + file_name + "\n";
}

Result<std::string> read_sidecar(const std::filesystem::path& path, const std::string& file_name) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));  // a FIFO never blocks
  if (!fd) {
    if (errno == ENOENT) {
      return make_error(ErrorCode::not_found, path.string() + " does not exist");
    }
    return make_errno_error(errno, "open " + path.string());
  }
  std::string text;
  if (int e = util::io::read_bounded(fd.get(), k_sidecar_max, text); e != 0) {
    return make_errno_error(e, "read " + path.string());
  }
  const std::string expected_tail = file_name + "\n";
  if (text.size() > k_sidecar_max || text.size() < 66 + expected_tail.size() ||
      !util::is_lower_hex(std::string_view(text).substr(0, 64)) || text[64] != ' ' ||
      (text[65] != ' ' && text[65] != '*') || text.substr(66) != expected_tail) {
    return make_error(ErrorCode::corrupt, path.string() + " is not a sha256sum line for " + file_name);
  }
  return text.substr(0, 64);
}

std::string_view to_string(SidecarState state) noexcept {
  switch (state) {
    case SidecarState::ok:
      return "ok";
    case SidecarState::missing_file:
      return "missing_file";
    case SidecarState::missing_sidecar:
      return "missing_sidecar";
    case SidecarState::bad_sidecar:
      return "bad_sidecar";
    case SidecarState::mismatch:
      return "mismatch";
  }
  return "unknown";
}

std::filesystem::path sidecar_path(const std::filesystem::path& file) {
  std::filesystem::path p = file;
  p += ".sha256";
  return p;
}

SidecarCheck check_sidecar(const std::filesystem::path& file) {
  SidecarCheck check;
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    check.state = SidecarState::missing_file;
    return check;
  }
  auto recorded = read_sidecar(sidecar_path(file), file.filename().string());
  if (!recorded) {
    check.state = recorded.error().code == ErrorCode::not_found ? SidecarState::missing_sidecar : SidecarState::bad_sidecar;
    return check;
  }
  check.sidecar_sha256 = *recorded;
  auto digest = hash_file(file);
  if (!digest) {
    check.state = SidecarState::missing_file;
    return check;
  }
  check.digest = *digest;
  check.state = digest->sha256 == *recorded ? SidecarState::ok : SidecarState::mismatch;
  return check;
}

}  // namespace kcache::plan
