// The parent side of the worker protocol: spawning, supervision, timeouts.
// See include/kcache/worker_pool.hpp and docs/worker-protocol.md.
#include "kcache/worker_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "deps/working_directory.hpp"
#include "util/fd.hpp"
#include "util/tied_child.hpp"
#include "worker/worker_protocol.hpp"

extern char** environ;

namespace kcache {

namespace {

using Clock = std::chrono::steady_clock;

// Why an exchange with a worker failed.
enum class Failure { none, died, garbage, timeout };

struct IoError {
  Failure failure = Failure::none;
  std::string reason;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 60 * 60));
}

// Waits for `events` on `fd` until `deadline`. Returns false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    struct pollfd p {fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) {
      return true;
    }
    if (n == 0) {
      return false;
    }
    if (errno != EINTR) {
      return true;  // let the following call report the error
    }
  }
}

IoError send_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        return {Failure::timeout, "did not read its request in time"};
      }
      continue;
    }
    return {Failure::died, std::string("went away while reading its request (") + std::strerror(errno) + ")"};
  }
  return {};
}

// Reads exactly `size` bytes. `what` names the part for messages.
IoError recv_exact(int fd, char* out, std::size_t size, Clock::time_point deadline, const char* what) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, out + done, size - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      if (done == 0 && std::strcmp(what, "header") == 0) {
        return {Failure::died, "closed its end without replying"};
      }
      return {Failure::died, std::string("sent a truncated frame (") + what + " cut after " + std::to_string(done) +
                                 " of " + std::to_string(size) + " bytes)"};
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) {
        return {Failure::timeout, "did not answer in time"};
      }
      continue;
    }
    return {Failure::died, std::string("connection failed (") + std::strerror(errno) + ")"};
  }
  return {};
}

struct ReadFrame {
  worker::Frame frame;
  IoError error;
};

ReadFrame recv_frame(int fd, Clock::time_point deadline) {
  ReadFrame out;
  char head[worker::k_frame_header_bytes];
  out.error = recv_exact(fd, head, sizeof head, deadline, "header");
  if (out.error.failure != Failure::none) {
    return out;
  }
  auto h = worker::parse_frame_header(std::string_view(head, sizeof head));
  if (!h) {
    out.error = {Failure::garbage, "sent a garbage frame: " + h.error().message};
    return out;
  }
  out.frame.type = h->type;
  constexpr std::size_t k_chunk = std::size_t{16} << 20;
  while (out.frame.body.size() < h->body_len) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(k_chunk, h->body_len - out.frame.body.size()));
    const std::size_t old = out.frame.body.size();
    out.frame.body.resize(old + want);
    out.error = recv_exact(fd, out.frame.body.data() + old, want, deadline, "body");
    if (out.error.failure != Failure::none) {
      return out;
    }
  }
  return out;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  }
  if (WIFEXITED(status)) {
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "stopped";
}

}  // namespace

struct WorkerPool::Impl {
  struct Slot {
    std::atomic<pid_t> pid{-1};  // read by worker_pids() while a caller owns the slot
    util::Fd sock;               // the parent's end of the socket pair
    bool busy = false;           // guarded by `mutex`
  };

  WorkerPoolOptions options;
  std::vector<std::string> env;
  mutable std::mutex mutex;
  std::condition_variable slot_freed;
  std::vector<std::unique_ptr<Slot>> slots;
  std::atomic<std::uint64_t> next_id{1};
  struct Counters {
    std::atomic<std::uint64_t> requests{0}, spawned{0}, crashed{0}, timed_out{0}, deduplicated{0};
  } c;

  std::size_t acquire() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      // Prefer a slot with a running worker, then any free one.
      std::size_t pick = slots.size();
      for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!slots[i]->busy && (pick == slots.size() || slots[i]->pid > 0)) {
          pick = i;
        }
      }
      if (pick != slots.size()) {
        slots[pick]->busy = true;
        return pick;
      }
      slot_freed.wait(lock);
    }
  }

  void release(std::size_t i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      slots[i]->busy = false;
    }
    slot_freed.notify_one();
  }

  // Kills (when still running) and reaps the worker of `s`. Returns its wait status.
  static int kill_and_reap(Slot& s, std::chrono::milliseconds grace) {
    int status = 0;
    s.sock.reset();
    if (s.pid <= 0) {
      return 0;
    }
    const auto deadline = Clock::now() + grace;
    for (;;) {
      const pid_t r = ::waitpid(s.pid, &status, WNOHANG);
      if (r == s.pid.load() || (r < 0 && errno != EINTR)) {
        break;
      }
      if (Clock::now() >= deadline) {
        ::kill(s.pid, SIGKILL);
        while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    s.pid = -1;
    return status;
  }

  Result<void> spawn(Slot& s) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return make_errno_error(errno, "socketpair for a worker");
    }
    util::Fd parent_end(sv[0]);
    util::Fd child_end(sv[1]);
    // A tied child: the kernel kills the worker when this process dies, however it dies.
    util::TiedChildSpec spec;
    spec.executable = options.executable;
    spec.argv.push_back(options.executable.string());
    spec.argv.insert(spec.argv.end(), options.arguments.begin(), options.arguments.end());
    spec.env = &env;
    spec.fds = {{child_end.get(), 0}, {child_end.get(), 1}};
    auto started = util::spawn_tied_child(spec);
    if (!started) {
      return make_error(ErrorCode::worker_crashed,
                        "cannot start worker " + options.executable.string() + ": " + started.error().message);
    }
    const pid_t pid = *started;
    c.spawned++;
    child_end.reset();
    ::fcntl(parent_end.get(), F_SETFL, O_NONBLOCK);
    s.pid = pid;
    s.sock = std::move(parent_end);
    auto hello = recv_frame(s.sock.get(), Clock::now() + options.start_timeout);
    std::string why;
    if (hello.error.failure != Failure::none) {
      why = hello.error.reason;
    } else if (hello.frame.type != worker::FrameType::hello) {
      why = "sent something other than hello first";
    } else if (auto h = worker::decode_hello(hello.frame.body); !h) {
      why = h.error().message;
    }
    if (!why.empty()) {
      const int status = kill_and_reap(s, std::chrono::milliseconds(200));
      return make_error(ErrorCode::worker_crashed, "worker " + options.executable.string() +
                                                       " did not start: it " + why + " and " +
                                                       describe_status(status));
    }
    return {};
  }

  Result<CompileOutput> compile(const CompileRequest& request) {
    const std::size_t i = acquire();
    Slot& s = *slots[i];
    struct Release {
      Impl* impl;
      std::size_t i;
      ~Release() { impl->release(i); }
    } release_guard{this, i};
    if (s.pid <= 0) {
      if (auto st = spawn(s); !st) {
        return tl::unexpected(st.error());
      }
    }
    c.requests++;
    const std::uint64_t id = next_id++;
    const pid_t pid = s.pid;
    const auto deadline = Clock::now() + options.request_timeout;
    // The worker compiles where this process is now, not where it was when
    // the worker started (empty when the directory cannot be named: the
    // worker's own is used, and a request that depends on it fails there).
    auto here = jit::nvrtc_working_directory();
    const std::string working_dir = here ? *here : std::string();
    IoError err = send_all(s.sock.get(), worker::encode_frame(worker::FrameType::compile,
                                                              worker::encode_compile(id, working_dir, request)),
                           deadline);
    ReadFrame reply;
    if (err.failure == Failure::none) {
      reply = recv_frame(s.sock.get(), deadline);
      err = reply.error;
    }
    Result<CompileOutput> out = make_error(ErrorCode::internal, "unset");
    if (err.failure == Failure::none) {
      auto decoded = worker::decode_reply(reply.frame.type, reply.frame.body, id);
      if (!decoded) {
        err = {Failure::garbage, "sent a malformed reply: " + decoded.error().message};
      } else {
        out = std::move(*decoded);
        if (!out && out.error().code == ErrorCode::worker_crashed) {
          // The worker reported its own failure (out of memory) and exits.
          c.crashed++;
          kill_and_reap(s, std::chrono::milliseconds(2000));
        }
        return out;
      }
    }
    const std::string who = "worker pid " + std::to_string(pid) + " compiling '" + request.name + "'";
    if (err.failure == Failure::timeout) {
      c.timed_out++;
      kill_and_reap(s, std::chrono::milliseconds(0));
      return make_error(ErrorCode::timeout, who + " " + err.reason + " (limit " +
                                                std::to_string(options.request_timeout.count()) +
                                                " ms); it was killed and will be replaced");
    }
    c.crashed++;
    // A garbage-writing worker may still be running: give it no grace.
    const auto grace = err.failure == Failure::garbage ? std::chrono::milliseconds(0) : std::chrono::milliseconds(2000);
    const int status = kill_and_reap(s, grace);
    std::string msg = who + " " + err.reason;
    if (err.failure == Failure::died) {
      msg += "; it " + describe_status(status);
    }
    return make_error(ErrorCode::worker_crashed, msg + "; a new worker will take the next request");
  }
};

Result<std::filesystem::path> default_worker_executable() {
  namespace fs = std::filesystem;
  auto usable = [](const fs::path& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; };
  if (const char* env = std::getenv("KCACHE_WORKER_EXECUTABLE"); env != nullptr && *env != '\0') {
    if (usable(env)) {
      return fs::path(env);
    }
    return make_error(ErrorCode::not_found,
                      std::string("KCACHE_WORKER_EXECUTABLE=") + env + " is not an executable file");
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    if (self.filename() == "kcache") {
      return self;
    }
    if (usable(self.parent_path() / "kcache")) {
      return self.parent_path() / "kcache";
    }
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const fs::path dir(std::string(rest.substr(0, colon)));
      if (usable(dir / "kcache")) {
        return dir / "kcache";
      }
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  return make_error(ErrorCode::not_found,
                    "no kcache executable found for worker processes; set KCACHE_WORKER_EXECUTABLE");
}

WorkerPool::WorkerPool(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Result<std::unique_ptr<WorkerPool>> WorkerPool::create(WorkerPoolOptions options) {
  if (options.executable.empty()) {
    auto exe = default_worker_executable();
    if (!exe) {
      return tl::unexpected(exe.error());
    }
    options.executable = *exe;
  }
  if (options.workers == 0) {
    options.workers = std::max(1U, std::thread::hardware_concurrency());
  }
  if (options.workers > 1024) {
    return make_error(ErrorCode::invalid_argument, "at most 1024 workers");
  }
  auto impl = std::make_unique<Impl>();
  // The environment: ours, with the given entries replacing same-named ones.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& o : options.environment) {
      overridden = overridden || std::string_view(o).substr(0, o.find('=')) == name;
    }
    if (!overridden) {
      impl->env.emplace_back(entry);
    }
  }
  impl->env.insert(impl->env.end(), options.environment.begin(), options.environment.end());
  for (unsigned i = 0; i < options.workers; ++i) {
    impl->slots.push_back(std::make_unique<Impl::Slot>());
  }
  impl->options = std::move(options);
  return std::unique_ptr<WorkerPool>(new WorkerPool(std::move(impl)));
}

WorkerPool::~WorkerPool() {
  if (!m_impl) {
    return;
  }
  // Ask every worker to exit, then give them a moment together before killing.
  const auto deadline = Clock::now() + std::chrono::milliseconds(100);
  for (auto& s : m_impl->slots) {
    if (s->pid > 0 && s->sock) {
      const std::string bye = worker::encode_frame(worker::FrameType::shutdown, "");
      (void)send_all(s->sock.get(), bye, deadline);
      s->sock.reset();
    }
  }
  for (auto& s : m_impl->slots) {
    Impl::kill_and_reap(*s, std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::max(Clock::duration::zero(), deadline + std::chrono::seconds(2) - Clock::now())));
  }
}

Result<CompileOutput> WorkerPool::compile(const CompileRequest& request) { return m_impl->compile(request); }

CompileFunction WorkerPool::compile_function() {
  return [this](const CompileRequest& request) { return compile(request); };
}

void WorkerPool::note_deduplicated() noexcept { m_impl->c.deduplicated++; }

unsigned WorkerPool::size() const noexcept { return static_cast<unsigned>(m_impl->slots.size()); }

std::vector<pid_t> WorkerPool::worker_pids() const {
  std::lock_guard<std::mutex> lock(m_impl->mutex);
  std::vector<pid_t> out;
  for (const auto& s : m_impl->slots) {
    if (const pid_t pid = s->pid; pid > 0) {
      out.push_back(pid);
    }
  }
  return out;
}

WorkerPoolStats WorkerPool::stats() const {
  WorkerPoolStats s;
  s.requests = m_impl->c.requests;
  s.spawned = m_impl->c.spawned;
  s.crashed = m_impl->c.crashed;
  s.timed_out = m_impl->c.timed_out;
  s.deduplicated = m_impl->c.deduplicated;
  return s;
}

}  // namespace kcache
