// Helpers for worker tests: children of this process, open descriptors.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kcache::test {

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
