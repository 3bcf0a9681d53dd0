// tests/integration/cli_shell.hpp: runs the real kcache command from a shell
// script, so a test can redirect its streams the way a user does
// (`> /dev/full`, `>&-`, `| head -c1`), in a private directory with a
// private cache. `$K` in the script is the kcache binary.
#pragma once

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache::test {

struct ShellRun {
  int rc = -1;      // the exit status of the script (its last command unless it says otherwise)
  std::string out;  // what the script wrote to its stdout
  std::string err;  // what it wrote to stderr
};

// Peak RSS of `kcache args` run with `env` in `cwd` (KiB), and its exit code
// (its stderr goes to cwd/measured.err). Compare with the same command's on
// a trivial input: a child starts with its parent's resident pages counted.
inline std::pair<int, long> run_measured(const std::filesystem::path& cwd, const std::string& env, const std::string& args) {
  const std::string cmd = "cd '" + cwd.string() + "' && exec env " + env + " '" + KCACHE_CLI_PATH + "' " + args +
                          " >/dev/null 2>measured.err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), usage.ru_maxrss};
}

class CliShell : public ::testing::Test {
 protected:
  // Runs `script` with bash in dir(), KCACHE_DIR=cache(), K=the kcache binary,
  // and no KCACHE_* setting of the person running the tests.
  ShellRun sh(const std::string& script) {
    const auto out = m_dir.path() / ".stdout";
    const auto err = m_dir.path() / ".stderr";
    const auto file = m_dir.path() / ".script";
    write_file(file, "cd '" + dir().string() + "' || exit 99\nexport K='" + std::string(KCACHE_CLI_PATH) + "'\n" + script +
                         "\n");
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string home = "HOME=" + (m_dir.path() / "home").string();
      const std::string cache = "KCACHE_DIR=" + this->cache().string();
      std::vector<const char*> env{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", home.c_str(), cache.c_str(), nullptr};
      const std::string redirect = "exec >'" + out.string() + "' 2>'" + err.string() + "' </dev/null; . '" +
                                   file.string() + "'";
      ::execle("/bin/bash", "bash", "-c", redirect.c_str(), static_cast<char*>(nullptr), env.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ShellRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }

  // Writes `bytes` to dir()/name and returns the key `kcache put` printed.
  std::string put(const std::string& name, const std::string& bytes) {
    write_file(dir() / name, bytes);
    const ShellRun r = sh("\"$K\" put " + name);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.out.substr(0, 64);
  }

  std::filesystem::path dir() const { return m_dir.path() / "work"; }
  std::filesystem::path root() const { return m_dir.path(); }
  std::filesystem::path cache() const { return m_dir.path() / "cache"; }

  static mode_t type_of(const std::filesystem::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
  }

  void SetUp() override {
    std::filesystem::create_directories(dir());
    std::filesystem::create_directories(m_dir.path() / "home");
  }

 private:
  TempDir m_dir;
};

}  // namespace kcache::test
