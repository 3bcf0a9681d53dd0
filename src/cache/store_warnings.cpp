// The per-process store warning sink; see store_warnings.hpp.
#include "cache/store_warnings.hpp"

#include <atomic>
#include <cstdio>

namespace kcache::store_warnings {

namespace {

std::atomic<bool> g_printed{false};  // any store warning printed in this process

}  // namespace

void warn(Source source, const std::string& line) {
  const bool first = !g_printed.exchange(true);
  if (source == Source::tier || first) {
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
  }
}

std::function<void(const std::string&)> sink(Source source) {
  return [source](const std::string& line) { warn(source, line); };
}

}  // namespace kcache::store_warnings
