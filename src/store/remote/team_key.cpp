#include "store/remote/team_key.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/random_bytes.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::remote {

std::string TeamKey::id_hex() const { return util::to_hex(id.data(), id.size()); }

Result<TeamKey> make_team_key(std::string secret, std::string source) {
  if (secret.size() < k_team_key_min_bytes) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("team key{}{} holds {} bytes, fewer than {}; make a new one with "
                                  "`kcache remote keygen FILE`",
                                  source.empty() ? "" : " ", source, secret.size(), k_team_key_min_bytes));
  }
  TeamKey key;
  util::Sha256 h;
  h.update(std::string_view("kcache-team-key-id\0", 19));
  h.update(secret);
  const auto digest = h.finish();
  std::copy_n(digest.begin(), key.id.size(), key.id.begin());
  key.secret = std::move(secret);
  key.source = std::move(source);
  return key;
}

Result<TeamKey> load_team_key(const std::filesystem::path& path) {
  const std::string name = path.string();
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    return make_error(err == ELOOP ? ErrorCode::invalid_argument : error_code_from_errno(err),
                      fmt::format("cannot read the team key file {}: {}; check `remote_key_file`", name,
                                  err == ELOOP ? "it is a symbolic link (give the real path)" : std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return make_errno_error(errno, "stat team key file " + name);
  }
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("team key file {} is not a regular file; point `remote_key_file` at the "
                                  "file `kcache remote keygen` wrote",
                                  name));
  }
  if ((st.st_mode & 0007) != 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("team key file {} can be read by other users (mode {:o}); run `chmod 600 {}`",
                                  name, st.st_mode & 0777, name));
  }
  if (st.st_size > static_cast<off_t>(k_team_key_max_file_bytes)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("team key file {} is larger than {} bytes; is it the right file?", name,
                                  k_team_key_max_file_bytes));
  }
  std::string bytes;
  if (int e = util::io::read_bounded(fd.get(), k_team_key_max_file_bytes, bytes, static_cast<std::size_t>(st.st_size));
      e != 0) {
    return make_errno_error(e, "read team key file " + name);
  }
  std::string_view text = bytes;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  if (text.size() >= 2 * k_team_key_min_bytes && text.size() % 2 == 0 && util::is_lower_hex(text)) {
    auto decoded = util::from_hex(text);
    if (decoded) {
      return make_team_key(std::string(decoded->begin(), decoded->end()), name);
    }
  }
  return make_team_key(std::move(bytes), name);
}

Result<TeamKey> generate_team_key_file(const std::filesystem::path& path) {
  std::array<std::uint8_t, 32> raw{};
  if (auto ok = util::random_bytes(raw.data(), raw.size(), "a new team key"); !ok) {
    return tl::unexpected(ok.error());
  }
  const std::string text = util::to_hex(raw.data(), raw.size()) + "\n";
  const std::string name = path.string();
  util::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    const int err = errno;
    if (err == EEXIST) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{} already exists; kcache never replaces a key file (remove it first, or "
                                    "choose another name)",
                                    name));
    }
    return make_errno_error(err, "create team key file " + name);
  }
  // The umask may have cleared bits but never adds any; make the mode exact.
  if (::fchmod(fd.get(), 0600) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return make_errno_error(err, "chmod 600 " + name);
  }
  std::size_t put = 0;
  while (put < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int err = errno;
      ::unlink(path.c_str());
      return make_errno_error(err, "write team key file " + name);
    }
    put += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::close(fd.release()) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return make_errno_error(err, "write team key file " + name);
  }
  return make_team_key(std::string(raw.begin(), raw.end()), name);
}

}  // namespace kcache::remote
