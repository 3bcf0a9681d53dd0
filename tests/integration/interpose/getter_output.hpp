// tests/integration/interpose/getter_output.hpp: how the test clients print
// what a JIT library's getter pair returned, so that two runs compare as text.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

// Appends what a getter pair returns for `h` to `out` (the codes, the size,
// then the bytes) and returns the bytes.
template <class Handle, class SizeFn, class GetFn>
std::string getter_output(std::string& out, const char* what, Handle h, SizeFn size_fn, GetFn get_fn) {
  size_t n = 0;
  const int rc = size_fn(h, &n);
  std::string bytes(n + 1, '\0');
  const int get_rc = rc == 0 ? get_fn(h, bytes.data()) : -1;
  bytes.resize(n);
  char line[128];
  std::snprintf(line, sizeof line, "%s size_rc=%d size=%zu get_rc=%d\n", what, rc, n, get_rc);
  out += line;
  out += bytes;
  out += "\n";
  return bytes;
}
