#include "util/process_identity.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "util/fd.hpp"

namespace kcache::util {

namespace {

// Reads at most `max` bytes of a small /proc file. Returns false when it cannot be read.
bool read_small_file(const char* path, std::string& out, std::size_t max = 1024) {
  Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return false;
  }
  out.resize(max);
  std::size_t done = 0;
  while (done < max) {
    const ssize_t n = ::read(fd.get(), out.data() + done, max - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return false;
    }
    if (n == 0) {
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return done != 0;
}

struct StatFields {
  char state = '?';
  std::uint64_t start = 0;
};

// The state (field 3) and start time (field 22) of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces and ')', so
// fields are counted from the last ')'.
std::optional<StatFields> read_stat_file(const char* path) {
  std::string text;
  if (!read_small_file(path, text)) {
    return std::nullopt;
  }
  const auto close = text.rfind(')');
  if (close == std::string::npos) {
    return std::nullopt;
  }
  StatFields f;
  unsigned field = 2;
  std::size_t at = close + 1;
  while (at < text.size()) {
    while (at < text.size() && text[at] == ' ') {
      ++at;
    }
    const std::size_t begin = at;
    while (at < text.size() && text[at] != ' ' && text[at] != '\n') {
      ++at;
    }
    if (begin == at) {
      break;
    }
    ++field;
    const std::string_view word(text.data() + begin, at - begin);
    if (field == 3) {
      f.state = word[0];
    } else if (field == 22) {
      std::uint64_t v = 0;
      for (const char c : word) {
        if (c < '0' || c > '9') {
          return std::nullopt;
        }
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      f.start = v;
      return f;
    }
  }
  return std::nullopt;
}

// True when some thread of `pid` is not a zombie: a process whose first
// thread exited while others run shows as a zombie in /proc/PID/stat.
bool has_live_thread(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", static_cast<int>(pid));
  DIR* dir = ::opendir(path);
  if (dir == nullptr) {
    return false;
  }
  bool live = false;
  while (const dirent* ent = ::readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(ent->d_name, &end, 10);
    if (tid <= 0 || *end != '\0') {
      continue;
    }
    char task[96];
    std::snprintf(task, sizeof task, "/proc/%d/task/%ld/stat", static_cast<int>(pid), tid);
    const auto fields = read_stat_file(task);
    if (fields && fields->state != 'Z' && fields->state != 'X') {
      live = true;
      break;
    }
  }
  ::closedir(dir);
  return live;
}

std::optional<StatFields> read_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  return read_stat_file(path);
}

// FNV-1a, then a finaliser: the domain only needs to differ between boots and
// namespaces, not to be secret.
std::uint64_t hash_bytes(std::string_view bytes, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (const char c : bytes) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t compute_domain() {
  std::string boot_id;
  struct stat ns {};
  if (!read_small_file("/proc/sys/kernel/random/boot_id", boot_id, 64) || ::stat("/proc/self/ns/pid", &ns) != 0) {
    return 0;
  }
  std::uint64_t h = hash_bytes(boot_id);
  h = hash_bytes(std::to_string(ns.st_dev) + ":" + std::to_string(ns.st_ino), h);
  h ^= h >> 31;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 29;
  return h == 0 ? 1 : h;
}

bool parse_decimal(std::string_view& text, std::uint64_t& value, std::size_t max_digits) {
  std::size_t n = 0;
  value = 0;
  while (n < text.size() && n < max_digits && text[n] >= '0' && text[n] <= '9') {
    value = value * 10 + static_cast<std::uint64_t>(text[n] - '0');
    ++n;
  }
  if (n == 0 || (n < text.size() && text[n] >= '0' && text[n] <= '9')) {
    return false;
  }
  text.remove_prefix(n);
  return true;
}

}  // namespace

std::string ProcessIdentity::to_string() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d-%llu-%016llx", static_cast<int>(pid), static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(domain));
  return buf;
}

std::optional<ProcessIdentity> ProcessIdentity::parse(std::string_view text, std::string_view& rest) {
  ProcessIdentity id;
  std::uint64_t pid = 0;
  if (!parse_decimal(text, pid, 10) || pid == 0 || pid > 0x7fffffff || text.empty() || text[0] != '-') {
    return std::nullopt;
  }
  text.remove_prefix(1);
  if (!parse_decimal(text, id.start, 20) || text.size() < 17 || text[0] != '-') {
    return std::nullopt;
  }
  text.remove_prefix(1);
  for (std::size_t i = 0; i < 16; ++i) {
    const char c = text[i];
    const int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (nibble < 0) {
      return std::nullopt;
    }
    id.domain = (id.domain << 4) | static_cast<std::uint64_t>(nibble);
  }
  id.pid = static_cast<pid_t>(pid);
  rest = text.substr(16);
  return id;
}

namespace {

// Guards current_process_identity's memo. Held across fork() by the forking
// thread (pthread_atfork), so that a child forked while another thread held
// it does not inherit it locked (a child of a multi-threaded program, such as
// an interposed Python process, would otherwise hang on its first compile).
std::mutex g_identity_mutex;

void hold_identity_across_fork() {
  static const bool registered =
      ::pthread_atfork([] { g_identity_mutex.lock(); }, [] { g_identity_mutex.unlock(); },
                       [] { g_identity_mutex.unlock(); }) == 0;
  (void)registered;
}

}  // namespace

ProcessIdentity current_process_identity() {
  static ProcessIdentity cached;
  static std::uint64_t domain = 0;
  static bool have_domain = false;
  hold_identity_across_fork();
  const pid_t pid = ::getpid();
  std::lock_guard<std::mutex> lock(g_identity_mutex);
  if (cached.pid == pid) {
    return cached;
  }
  // The boot and the pid namespace survive a fork; only the pid and the start time change.
  if (!have_domain) {
    domain = compute_domain();
    have_domain = true;
  }
  ProcessIdentity id;
  id.pid = pid;
  const auto fields = read_stat(pid);
  if (fields && fields->start != 0) {
    id.start = fields->start;
    id.domain = domain;
  }
  cached = id;
  return id;
}

Liveness liveness_of(const ProcessIdentity& id, PidCheck check) {
  const ProcessIdentity me = current_process_identity();
  if (id.domain == 0 || id.domain != me.domain || id.pid <= 0) {
    return Liveness::unknown;
  }
  if (id.pid == me.pid) {
    return id.start == me.start ? Liveness::alive : Liveness::gone;
  }
  if (::kill(id.pid, 0) != 0 && errno == ESRCH) {
    return Liveness::gone;
  }
  if (check == PidCheck::exists) {
    return Liveness::alive;
  }
  const auto fields = read_stat(id.pid);
  if (!fields) {
    // Exited in between, or hidden from us (/proc mounted with hidepid):
    // only a pid that no longer exists is gone.
    return ::kill(id.pid, 0) != 0 && errno == ESRCH ? Liveness::gone : Liveness::alive;
  }
  if (fields->start != id.start) {
    return Liveness::gone;
  }
  if (fields->state == 'Z' || fields->state == 'X') {
    // A zombie is gone, unless only its first thread exited and others still run.
    return has_live_thread(id.pid) ? Liveness::alive : Liveness::gone;
  }
  return Liveness::alive;
}

}  // namespace kcache::util
