// tests/integration/nvcc_shell.hpp: what the nvcc launcher's tests share: the
// real nvcc, a plain-nvcc reference, and the comparison of two objects.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "integration/cli_shell.hpp"

namespace kcache::test {

// The nvcc the tests run: $KCACHE_TEST_NVCC, else /usr/local/cuda/bin/nvcc;
// empty when it is not there (the tests then skip).
inline std::string test_nvcc() {
  const char* env = std::getenv("KCACHE_TEST_NVCC");
  const std::string path = env != nullptr && *env != '\0' ? env : "/usr/local/cuda/bin/nvcc";
  return ::access(path.c_str(), X_OK) == 0 ? path : std::string();
}

// nvcc names its temporary files `tmpxft_<pid>_<n>-...` and the host
// compiler writes that name into the object's symbol table: two compiles of
// one input differ there only. Masked, they compare equal.
inline std::string mask_temporary_names(const std::string& bytes) {
  static const std::regex k_tmpxft("tmpxft_[0-9a-f]{8}_[0-9a-f]{8}");
  return std::regex_replace(bytes, k_tmpxft, "tmpxft_XXXXXXXX_XXXXXXXX");
}

// A toolkit at `root` whose bin/nvcc appends a line to $KCACHE_TEST_NVCC_LOG
// for each compile it runs (its arguments hold " -c ", not --dryrun) and then runs the real
// `nvcc`; every other file is a link to the real toolkit's, so kcache sees
// the same programs. Returns the wrapper's path.
inline std::string make_counting_nvcc(const std::filesystem::path& root, const std::string& nvcc) {
  namespace fs = std::filesystem;
  const fs::path real_root = fs::path(nvcc).parent_path().parent_path();
  fs::create_directories(root / "bin");
  for (const auto& e : fs::directory_iterator(real_root)) {
    if (e.path().filename() != "bin") {
      fs::create_symlink(e.path(), root / e.path().filename());
    }
  }
  for (const auto& e : fs::directory_iterator(real_root / "bin")) {
    if (e.path().filename() != "nvcc") {
      fs::create_symlink(e.path(), root / "bin" / e.path().filename());
    }
  }
  const fs::path wrapper = root / "bin" / "nvcc";
  write_file(wrapper, "#!/bin/sh\ncase \" $* \" in *--dryrun*) ;; *\" -c \"*) [ -n \"$KCACHE_TEST_NVCC_LOG\" ] && echo \"$*\" >> "
                      "\"$KCACHE_TEST_NVCC_LOG\";; esac\nexec '" + nvcc + "' \"$@\"\n");
  fs::permissions(wrapper, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  return wrapper.string();
}

// Lines in `log` (the compiles a counting nvcc ran).
inline std::size_t count_lines(const std::filesystem::path& log) {
  const std::string text = read_file(log);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

class NvccShell : public CliShell {
 protected:
  void SetUp() override {
    CliShell::SetUp();
    m_nvcc = test_nvcc();
    if (m_nvcc.empty()) {
      GTEST_SKIP() << "no nvcc (set KCACHE_TEST_NVCC or install the CUDA toolkit in /usr/local/cuda)";
    }
  }

  // Runs `script` with $NVCC set to the real nvcc and the launcher's
  // outcome line on (KCACHE_NVCC_EXPLAIN).
  ShellRun nv(const std::string& script) {
    return sh("export NVCC='" + m_nvcc + "' KCACHE_NVCC_EXPLAIN=1\n" + script);
  }

  // The launcher's outcome of the last nvcc command in `r`: "hit", "compiled", "failed", "uncached" ...
  static std::string outcome(const ShellRun& r) {
    const auto at = r.err.rfind("kcache: nvcc ");
    if (at == std::string::npos) {
      return "none";
    }
    const auto start = at + 13;
    const auto end = r.err.find_first_of(" :\n", start);
    return r.err.substr(start, end - start);
  }

  const std::string& nvcc() const { return m_nvcc; }

 private:
  std::string m_nvcc;
};

}  // namespace kcache::test
