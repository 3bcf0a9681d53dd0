#include "interpose/session.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/single_threaded.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <vector>

#include "cache/store_warnings.hpp"
#include "kcache/config.hpp"
#include "kcache/request_stats.hpp"
#include "kcache/toolkit.hpp"
#include "kcache/write_behind_store.hpp"

namespace kcache::interpose {

namespace {

// Storage for the process-wide state, re-made in place in a forked child
// (whatever other threads held at fork time stays held in the copy).
alignas(std::mutex) unsigned char g_make_storage[sizeof(std::mutex)];
alignas(std::shared_timed_mutex) unsigned char g_use_storage[sizeof(std::shared_timed_mutex)];
std::mutex* g_make = new (g_make_storage) std::mutex();
std::shared_timed_mutex* g_use = new (g_use_storage) std::shared_timed_mutex();

Session* g_session = nullptr;  // guarded by g_make; leaked on purpose (see exit_handler)
bool g_made = false;           // guarded by g_make
std::atomic<bool> g_exiting{false};
pid_t g_owner = 0;  // the process that made g_session
std::array<std::atomic<bool>, k_jit_count> g_warned{};

void after_fork_in_child() {
  g_make = new (g_make_storage) std::mutex();
  g_use = new (g_use_storage) std::shared_timed_mutex();
  // The parent's stores belong to its threads: leak them, make new ones on first use.
  g_session = nullptr;
  g_made = false;
}

// At exit: waits (a bounded time) for calls in flight, then publishes what
// is still queued by destroying the stores. The session object itself is
// never deleted (a late call from another thread finds no session).
void exit_handler() {
  if (g_owner != ::getpid()) {
    return;
  }
  g_exiting.store(true);
  if (!g_use->try_lock_for(std::chrono::seconds(5))) {
    store_warnings::flush();
    return;  // a compile still runs: leave its stores alone
  }
  Session* s = nullptr;
  {
    std::lock_guard lock(*g_make);
    s = g_session;
    g_session = nullptr;
  }
  delete s;  // flushes background and remote puts
  store_warnings::flush();
  // g_use stays locked: no call uses a session any more.
}

}  // namespace

struct SessionFactory {
  static Session* make() {
    std::vector<Error> problems;
    ConfigInputs inputs;
    inputs.problems = &problems;
    auto config = Config::load_from(inputs);
    if (!config || !problems.empty()) {
      const std::string why = !config ? config.error().describe() : problems.front().describe();
      // Made once per process: one line, whichever library asked first.
      std::fprintf(stderr, "kcache: warning: kcache run: compiling without the cache: %s\n", why.c_str());
      return nullptr;
    }
    if (config->disable || config->cache_dir.empty()) {
      return nullptr;
    }
    Toolkit::instance().set_memo_dir(config->cache_dir / "v1" / "toolkit");
    // A program that has one thread keeps one: the first thread a process
    // creates makes glibc lock every stdio call from then on, and NVRTC reads
    // its headers a character at a time (a background put thread made every
    // later compile of a header-heavy kernel 1-2 % slower). So the local put
    // is published on the caller's thread here (`fsync = none` by default:
    // a few hundred microseconds); a program with threads keeps `put`.
    // Remote uploads keep their own queue and thread (docs/run.md).
    if (__libc_single_threaded != 0) {
      config->put = PutMode::sync;
    }
    auto store = open_configured_store(*config);
    if (!store) {
      store_warnings::warn(store_warnings::Source::tier,
                           "kcache run: compiling without the cache: " + store.error().describe());
      return nullptr;
    }
    std::unique_ptr<Session> s(new Session());
    s->m_store = std::move(*store);
    CacheOptions options;
    options.lock_dir = config->cache_dir / "v1" / "locks";
    options.warn = store_warnings::sink(store_warnings::Source::layer);
    options.remote_lease = open_configured_lease(*config);
    // The session counts each interposed call itself (count_request below),
    // for the calls that never reach the Cache too.
    options.count_requests = false;
    s->m_cache = std::make_unique<Cache>(*s->m_store, std::move(options));
    s->m_counters = InterposedCounters::open(config->cache_dir,
                                             config->sharing == Sharing::private_to_user ? 0600 : 0660);
    return s.release();
  }
};

Session* Session::get() noexcept {
  std::lock_guard lock(*g_make);
  if (!g_made) {
    g_made = true;
    try {
      g_session = SessionFactory::make();
    } catch (...) {
      g_session = nullptr;
    }
    g_owner = ::getpid();
    // Registered after the stores exist and after the warning state is made
    // (flush() makes it): exit handlers and static destructors run in reverse
    // order, so those statics are still alive when exit_handler runs.
    static const bool registered = [] {
      store_warnings::flush();
      ::pthread_atfork(nullptr, nullptr, after_fork_in_child);
      std::atexit(exit_handler);
      return true;
    }();
    (void)registered;
  }
  return g_session;
}

Session::~Session() = default;

Session::Use::Use() {
  if (g_exiting.load() || !g_use->try_lock_shared()) {
    return;
  }
  m_locked = true;
  m_session = Session::get();
}

Session::Use::~Use() {
  if (m_locked) {
    g_use->unlock_shared();
  }
}

namespace {

constexpr std::string_view k_route = "run";

// Counts one interposed call as a request of the route "run" (kcache/
// request_stats.hpp) in `store`'s cache directory (none when null) and in
// the `kcache run` report: a hit is served from the tier the session's Cache
// found it in; a call the real library compiled without the cache, or with
// kcache failing (a fallback), is uncached.
void count_request(Store* store, InterposedEvent event, Session::Failure failure = Session::Failure::no) noexcept {
  const auto last = Cache::last_request();
  switch (event) {
    case InterposedEvent::hit:
      record_request(store, k_route,
                     failure == Session::Failure::yes ? RequestOutcome::served_failure : RequestOutcome::served,
                     last ? last->tier : std::nullopt, last ? last->compile_us : 0);
      return;
    case InterposedEvent::compile:
      record_request(store, k_route, RequestOutcome::compiled, std::nullopt, last ? last->compile_us : 0);
      return;
    case InterposedEvent::uncached:
    case InterposedEvent::fallback:
    case InterposedEvent::count_:
      break;
  }
  record_request(store, k_route, RequestOutcome::uncached, std::nullopt, 0);
}

// Appends `event` to KCACHE_INTERPOSE_LOG, when set.
void write_log(Jit jit, InterposedEvent event, std::string_view key_hex) noexcept;

}  // namespace

void Session::record(Jit jit, InterposedEvent event, std::string_view key_hex, Failure failure) noexcept {
  if (m_counters) {
    m_counters->add(static_cast<unsigned>(jit), event);
  }
  count_request(m_store.get(), event, failure);
  write_log(jit, event, key_hex);
}

void Session::log_event(Jit jit, InterposedEvent event, std::string_view key_hex) noexcept {
  count_request(nullptr, event);
  write_log(jit, event, key_hex);
}

namespace {

void write_log(Jit jit, InterposedEvent event, std::string_view key_hex) noexcept {
  const char* path = std::getenv("KCACHE_INTERPOSE_LOG");
  if (path == nullptr || *path == '\0') {
    return;
  }
  static constexpr std::array<const char*, 4> k_words = {"hit", "compile", "uncached", "fallback"};
  char line[256];
  const int n = std::snprintf(line, sizeof line, "%d %.*s %s %.*s\n", static_cast<int>(::getpid()),
                              static_cast<int>(to_string(jit).size()), to_string(jit).data(),
                              k_words[static_cast<unsigned>(event) % k_words.size()],
                              static_cast<int>(key_hex.empty() ? 1 : key_hex.size()),
                              key_hex.empty() ? "-" : key_hex.data());
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || n <= 0) {
    if (fd >= 0) {
      ::close(fd);
    }
    return;
  }
  // One write of a short line with O_APPEND: lines of concurrent processes never mix.
  [[maybe_unused]] const ssize_t w = ::write(fd, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
  ::close(fd);
}

}  // namespace

void Session::warn_once(Jit jit, const std::string& line) noexcept {
  if (g_warned[static_cast<int>(jit)].exchange(true)) {
    return;
  }
  std::fprintf(stderr, "kcache: warning: kcache run (%.*s): %s; calling the real library without the cache\n",
               static_cast<int>(to_string(jit).size()), to_string(jit).data(), line.c_str());
}

}  // namespace kcache::interpose
