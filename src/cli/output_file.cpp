#include "cli/output_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/atomic_write.hpp"
#include "util/input_file.hpp"
#include "util/wire_codec.hpp"

namespace kcache::cli {

namespace {
void ignore_signal(int) {}
}  // namespace

Result<void> write_to_stdout(std::string_view bytes) {
  if (std::fflush(stdout) != 0) {
    return make_errno_error(errno, "cannot write to standard output");
  }
  if (const int e = wire::write_all_errno(STDOUT_FILENO, bytes); e != 0) {
    return make_errno_error(e, "cannot write to standard output");
  }
  return {};
}

Result<void> write_output(const std::string& path, std::string_view bytes) {
  if (path == "-") {
    return write_to_stdout(bytes);
  }
  // util's errors already name the path ("cannot write PATH: No space left on device").
  if (auto ok = util::write_output_file(path, bytes); !ok) {
    return tl::unexpected(ok.error());
  }
  return {};
}

Result<void> check_input_file(const std::string& path) { return util::check_input_file(path, {}); }

void prepare_standard_streams(bool handle_sigpipe) {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      // open() returns the lowest free descriptor: this one.
      const int got = ::open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY));
      if (got >= 0 && got != fd) {
        ::close(got);
      }
    }
  }
  if (handle_sigpipe) {
    struct sigaction sa {};
    sa.sa_handler = ignore_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGPIPE, &sa, nullptr);
  }
}

bool finish_standard_output() {
  errno = 0;
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0) {
    return true;
  }
  const int err = errno != 0 ? errno : EIO;
  std::fprintf(stderr, "kcache: error: io: cannot write to standard output: %s\n"
                       "kcache: hint: the output of the command was lost (standard output is closed, full or a "
                       "pipe without a reader); the cache is not affected\n",
               std::strerror(err));
  return false;
}

}  // namespace kcache::cli
