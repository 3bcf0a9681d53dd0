// Helpers for worker tests: children of this process, open descriptors.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kcache/compile_request.hpp"
#include "kcache/toolkit.hpp"
#include "support/slow_kernel.hpp"

namespace kcache::test {

// True when NVRTC can be found; tests that compile skip with a clear message otherwise.
inline bool have_nvrtc(std::string* why = nullptr) {
  auto p = kcache::Toolkit::instance().library_path(kcache::ToolkitLibrary::nvrtc);
  if (!p && why != nullptr) {
    *why = p.error().describe();
  }
  return p.has_value();
}

#define KCACHE_REQUIRE_NVRTC()                                                   \
  do {                                                                           \
    std::string why_;                                                            \
    if (!kcache::test::have_nvrtc(&why_)) {                                      \
      GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine: " << why_;       \
    }                                                                            \
  } while (0)

// A CUDA C++ request for a small kernel named `kernel` that adds `k` to each element.
inline kcache::CompileRequest kernel_request(const std::string& kernel, int k = 1,
                                             const std::string& target = "ptx",
                                             const std::string& arch = "compute_75") {
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.name = kernel + ".cu";
  r.source = "extern \"C\" __global__ void " + kernel +
             "(int* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += " +
             std::to_string(k) + "; }\n";
  r.target_kind = target;
  r.options = {"-arch=" + arch};
  return r;
}

// A request that takes NVRTC a while (a few hundred ms): many template instances.
inline kcache::CompileRequest slow_request(const std::string& tag, const std::string& target = "cubin",
                                           const std::string& arch = "sm_80") {
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.name = "slow_" + tag + ".cu";
  r.source = slow_kernel_source("slow_" + tag);
  r.target_kind = target;
  r.options = {"-arch=" + arch};
  return r;
}

// Processes whose parent is this process, as (pid, state letter).
inline std::vector<std::pair<int, char>> children_of_self() {
  std::vector<std::pair<int, char>> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) {
    return out;
  }
  const int self = ::getpid();
  while (dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) {
      continue;
    }
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) {
      continue;
    }
    const auto close = line.rfind(')');
    if (close == std::string::npos) {
      continue;
    }
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) {
      out.emplace_back(pid, state);
    }
  }
  ::closedir(d);
  return out;
}

inline int open_fd_count() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) {
    return -1;
  }
  while (dirent* e = ::readdir(d)) {
    n += e->d_name[0] != '.' ? 1 : 0;
  }
  ::closedir(d);
  return n - 1;  // the directory stream itself
}

}  // namespace kcache::test
