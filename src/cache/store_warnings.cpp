// The per-process store warning sink; see store_warnings.hpp.
#include "cache/store_warnings.hpp"

#include <cstdio>
#include <mutex>

namespace kcache::store_warnings {

namespace {

struct State {
  std::mutex mutex;
  bool printed = false;  // a line was printed in this process
  bool held = false;     // a layer line waits in `pending`
  std::string pending;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  // At exit, a held line that no tier line replaced is still said.
  ~State() { flush_locked(); }

  void flush_locked() {
    if (held && !printed) {
      std::fprintf(stderr, "kcache: warning: %s\n", pending.c_str());
      printed = true;
    }
    held = false;
    pending.clear();
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void warn(Source source, const std::string& line) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (source == Source::tier) {
    // The tier says what failed and what to do: it replaces a held layer line.
    s.held = false;
    s.pending.clear();
    s.printed = true;
    std::fprintf(stderr, "kcache: warning: %s\n", line.c_str());
    return;
  }
  if (!s.printed && !s.held) {
    s.held = true;
    s.pending = line;
  }
}

void flush() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.flush_locked();
}

std::function<void(const std::string&)> sink(Source source) {
  return [source](const std::string& line) { warn(source, line); };
}

}  // namespace kcache::store_warnings
