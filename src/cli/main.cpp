// The kcache command line. Subcommands are registered from cmd_*.cpp.
#include <cstdio>

int main() {
  std::puts("kcache: no subcommands yet");
  return 0;
}
