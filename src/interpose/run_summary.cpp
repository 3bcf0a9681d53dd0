// The summary `kcache run` prints at exit (docs/run.md, "The summary").
//
// `kcache run` makes a report in memory (store/file/request_file.hpp), names
// it in KCACHE_RUN_REPORT and execs the program, so the program keeps
// kcache's pid. Every process of the run counts its requests there as they
// end (record_request: the stand-in's interposed calls, kcache.triton's
// kernels, any route). The program's top process — the one whose pid the
// variable names — prints one line on stderr when it exits:
//
//   kcache run: 7 JIT compiles seen: 5 served (4 disk, 1 remote), 2 compiled; 1.52 s of compiling saved
//
// or, when nothing was seen, a line that says so and why that may be.
//
// It exits through exit() (the line is printed by an exit handler registered
// before the program's own, so after them) or through _exit() / _Exit() (a
// shell's `exit`, Python's os._exit), which the stand-in exports: in the top
// process they print the line first, in every other process they are the
// system call alone, as glibc's. The line is made without allocating (a
// process may call _exit from a signal handler) and written with one write(2).
// A top process killed by a signal, and a program the stand-in does not enter
// (static, setuid), print nothing.
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kcache/request_stats.hpp"
#include "store/file/request_file.hpp"

namespace kcache::interpose {

namespace {

pid_t g_top = 0;  // this process's pid when it is the top process of a run, else 0
std::atomic<bool> g_printed{false};

// A line built in a fixed buffer (no allocation); what does not fit is cut.
class Line {
 public:
  void add(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    if (m_size >= m_text.size() - 1) {
      return;
    }
    va_list args;
    va_start(args, format);
    const int n = std::vsnprintf(m_text.data() + m_size, m_text.size() - m_size, format, args);
    va_end(args);
    if (n > 0) {
      m_size = std::min(m_text.size() - 1, m_size + static_cast<std::size_t>(n));
    }
  }
  void duration(std::uint64_t us) {
    if (us < 1000) {
      add("%llu us", static_cast<unsigned long long>(us));
    } else if (us < 1000000) {
      add("%.1f ms", static_cast<double>(us) / 1e3);
    } else {
      add("%.2f s", static_cast<double>(us) / 1e6);
    }
  }
  void write_to(int fd) {
    if (m_size == 0 || m_text[m_size - 1] != '\n') {
      if (m_size == m_text.size() - 1) {
        --m_size;
      }
      m_text[m_size++] = '\n';
    }
    std::size_t done = 0;
    while (done < m_size) {
      const ssize_t w = ::write(fd, m_text.data() + done, m_size - done);
      if (w <= 0) {
        return;
      }
      done += static_cast<std::size_t>(w);
    }
  }

 private:
  std::array<char, 1024> m_text{};
  std::size_t m_size = 0;
};

// How a route reads in the summary.
const char* route_words(const char* route) {
  if (std::strcmp(route, "run") == 0) {
    return "NVRTC/nvJitLink/NVVM";
  }
  if (std::strcmp(route, "triton") == 0) {
    return "Triton";
  }
  return route;
}

void summarize(const RequestStats& report, Line& line) {
  std::array<RequestStats::Row, RequestStats::k_rows> rows;
  const std::size_t n = report.read_rows(rows.data(), rows.size());
  RequestCounts all;
  std::size_t used = 0;
  for (std::size_t i = 0; i < n; ++i) {
    all += rows[i].counts;
    used += rows[i].counts.total() != 0 ? 1 : 0;
  }
  if (all.total() == 0) {
    line.add("kcache run: no JIT compile seen (no NVRTC, nvJitLink or NVVM call reached kcache, and no kcache "
             "integration asked). A program that compiles GPU code may link NVRTC statically (Warp does) or compile "
             "in a subprocess (Triton runs ptxas: kcache caches Triton where Python can import kcache); see "
             "docs/run.md, \"Nothing seen\".");
    return;
  }
  line.add("kcache run: %llu JIT compile%s seen", static_cast<unsigned long long>(all.total()),
           all.total() == 1 ? "" : "s");
  if (used > 1) {
    const char* sep = " (";
    for (std::size_t i = 0; i < n; ++i) {
      if (rows[i].counts.total() != 0) {
        line.add("%s%s %llu", sep, route_words(rows[i].route.data()),
                 static_cast<unsigned long long>(rows[i].counts.total()));
        sep = ", ";
      }
    }
    line.add(")");
  }
  line.add(": %llu served", static_cast<unsigned long long>(all.served_total()));
  const char* sep = " (";
  for (unsigned t = 0; t < k_tier_count; ++t) {
    if (all.served[t] != 0) {
      const std::string_view tier = to_string(static_cast<Tier>(t));
      line.add("%s%llu %.*s", sep, static_cast<unsigned long long>(all.served[t]), static_cast<int>(tier.size()),
               tier.data());
      sep = ", ";
    }
  }
  if (all.served_failed != 0) {
    line.add("%s%llu of a failed compile", sep[0] == ',' ? "; " : " (", static_cast<unsigned long long>(all.served_failed));
    sep = ", ";
  }
  if (sep[0] == ',') {
    line.add(")");
  }
  line.add(", %llu compiled", static_cast<unsigned long long>(all.compiled));
  if (all.uncached != 0) {
    line.add(", %llu compiled without the cache", static_cast<unsigned long long>(all.uncached));
  }
  if (all.failed != 0) {
    line.add(", %llu failed", static_cast<unsigned long long>(all.failed));
  }
  if (all.compile_us_saved != 0) {
    line.add("; ");
    line.duration(all.compile_us_saved);
    line.add(" of compiling saved");
  }
}

// Prints the summary once, in the top process only. `flush`: the program's
// stdio output first, as exit() would flush it after its handlers (never in
// _exit, which leaves stdio unflushed by definition).
void print_summary(bool flush) noexcept {
  if (g_top == 0 || ::getpid() != g_top || g_printed.exchange(true)) {
    return;  // another process (a forked child), or printed already
  }
  const RequestStats* report = store::run_report();
  if (report == nullptr || !store::is_run_top()) {
    return;  // a report that cannot be opened (the program closed its descriptor)
  }
  Line line;
  summarize(*report, line);
  if (flush) {
    std::fflush(nullptr);
  }
  line.write_to(STDERR_FILENO);
}

void at_exit() { print_summary(true); }

// Arranges the summary in the top process of a run only: every other process
// pays one getenv and one getpid. Registered before anything of kcache is
// made, so it runs after the session's exit handler has published what was
// queued. The report is opened here too, so that _exit needs no allocation.
__attribute__((constructor)) void arrange_summary() {
  const char* value = std::getenv(store::k_run_report_env);
  if (value == nullptr) {
    return;
  }
  const std::string_view v(value);
  const auto colon = v.find(':');
  long pid = 0;
  if (colon == std::string_view::npos) {
    return;
  }
  const auto [end, ec] = std::from_chars(v.data(), v.data() + colon, pid);
  if (ec != std::errc() || end != v.data() + colon || pid != ::getpid() || !store::is_run_top()) {
    return;
  }
  g_top = static_cast<pid_t>(pid);
  std::atexit(at_exit);
}

[[noreturn]] void exit_now(int status) {
  print_summary(false);
  for (;;) {
    ::syscall(SYS_exit_group, status);
  }
}

}  // namespace

}  // namespace kcache::interpose

// _exit and _Exit as glibc's (the exit_group system call), with the summary
// first in the top process of a run (see above). exit() reaches glibc's own
// _exit internally, not these.
extern "C" __attribute__((visibility("default"), noreturn)) void _exit(int status) {
  kcache::interpose::exit_now(status);
}

extern "C" __attribute__((visibility("default"), noreturn)) void _Exit(int status) {
  kcache::interpose::exit_now(status);
}
