#include "nvcc/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "util/fd.hpp"
#include "util/tied_child.hpp"

namespace kcache::nvcc {

Result<ChildOutput> run_captured(const std::filesystem::path& executable, const std::vector<std::string>& argv,
                                 std::size_t max_bytes) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return make_errno_error(errno, "cannot run " + executable.string() + ": pipe");
  }
  util::Fd out_read(out_pipe[0]);
  util::Fd out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return make_errno_error(errno, "cannot run " + executable.string() + ": pipe");
  }
  util::Fd err_read(err_pipe[0]);
  util::Fd err_write(err_pipe[1]);
  util::Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_in) {
    return make_errno_error(errno, "cannot open /dev/null");
  }
  util::TiedChildSpec spec;
  spec.executable = executable;
  spec.argv = argv;
  spec.fds = {{null_in.get(), 0}, {out_write.get(), 1}, {err_write.get(), 2}};
  auto pid = util::spawn_tied_child(spec);
  if (!pid) {
    return tl::unexpected(pid.error());
  }
  out_write.reset();
  err_write.reset();
  null_in.reset();
  ChildOutput result;
  pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_pipes = 2;
  char buffer[65536];
  while (open_pipes > 0) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) {
        continue;
      }
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got <= 0) {
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      const auto size = static_cast<std::size_t>(got);
      if (sinks[i]->size() + size > max_bytes) {
        result.truncated = true;
        sinks[i]->append(buffer, max_bytes - std::min(max_bytes, sinks[i]->size()));
      } else {
        sinks[i]->append(buffer, size);
      }
    }
  }
  int wstatus = 0;
  while (::waitpid(*pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      return make_errno_error(errno, "cannot wait for " + executable.string());
    }
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.signal = WTERMSIG(wstatus);
  }
  return result;
}

int exec_program(const std::filesystem::path& executable, const std::vector<std::string>& argv) {
  std::vector<char*> list;
  list.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    list.push_back(const_cast<char*>(a.c_str()));
  }
  list.push_back(nullptr);
  ::execv(executable.c_str(), list.data());
  return errno;
}

bool write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace kcache::nvcc
