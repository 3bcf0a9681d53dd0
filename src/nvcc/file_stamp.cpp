#include "nvcc/file_stamp.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace {
constexpr std::int64_t k_racy_window_ns = std::int64_t{2'000'000'000};
}

FileStamp FileStamp::of(const struct stat& st) noexcept {
  FileStamp s;
  s.dev = static_cast<std::uint64_t>(st.st_dev);
  s.ino = static_cast<std::uint64_t>(st.st_ino);
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  s.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return s;
}

bool FileStamp::is_racy(std::int64_t now_ns) const noexcept {
  const std::int64_t newest = mtime_ns > ctime_ns ? mtime_ns : ctime_ns;
  return newest > now_ns - k_racy_window_ns;
}

std::int64_t FileStamp::settled_ns() const noexcept {
  const bool whole_seconds = mtime_ns % 1'000'000'000 == 0 && ctime_ns % 1'000'000'000 == 0;
  const std::int64_t tick = whole_seconds ? 2'000'000'000 : 100'000'000;
  return std::max(mtime_ns, ctime_ns) + tick;
}

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return std::nullopt;
  }
  return FileStamp::of(st);
}

std::optional<std::string> sha256_of_file(const std::string& path, FileStamp* stamp) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return std::nullopt;
  }
  if (stamp != nullptr) {
    *stamp = FileStamp::of(st);
  }
  util::Sha256 h;
  std::vector<char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return std::nullopt;
    }
    if (n == 0) {
      break;
    }
    h.update(buffer.data(), static_cast<std::size_t>(n));
  }
  const auto d = h.finish();
  return util::to_hex(d.data(), d.size());
}

}  // namespace kcache::nvcc
