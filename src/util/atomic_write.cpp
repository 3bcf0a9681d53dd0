#include "util/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "util/fd.hpp"

namespace kcache::util {

Result<void> write_file_atomically(const std::filesystem::path& path, std::string_view bytes, mode_t mode,
                                   FileSync sync) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  // O_EXCL on a fresh name rather than mkstemp: the kernel then applies the
  // umask to `mode`, with no process-wide umask() dance.
  std::string tmpl;
  Fd fd;
  // pid + a nanosecond clock + the attempt make the name unique enough;
  // O_EXCL makes it safe. (std::random_device costs more than the write
  // of a small file: it probes the CPU with cpuid, a VM exit.)
  const auto stamp = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int attempt = 0; attempt < 100 && !fd; ++attempt) {
    // Appended piecewise: GCC 12 at -O3 warns (-Wrestrict) on "." + std::string&&.
    std::string name(1, '.');
    name += path.filename().string();
    name += ".kcache-";
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(stamp + static_cast<unsigned long long>(attempt));
    tmpl = (dir / name).string();
    fd.reset(::open(tmpl.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
    if (!fd && errno != EEXIST) {
      break;
    }
  }
  if (!fd) {
    return make_errno_error(errno, "cannot create a temporary file beside " + path.string());
  }
  auto fail = [&](int err, std::string_view what) {
    ::unlink(tmpl.c_str());
    return make_errno_error(err, std::string(what) + " " + path.string());
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return fail(errno, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (sync == FileSync::fsync && ::fsync(fd.get()) != 0) {
    return fail(errno, "cannot fsync");
  }
  if (::close(fd.release()) != 0) {
    return fail(errno, "cannot close");
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    return fail(errno, "cannot rename the temporary file to");
  }
  return {};
}

}  // namespace kcache::util
