// Single-flight locks: an in-process table for threads plus OFD locks on
// <lock_dir>/<key>.lock for processes. See include/kcache/single_flight.hpp.
#include "kcache/single_flight.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "util/fd.hpp"

namespace kcache {

struct SingleFlight::Impl {
  std::filesystem::path lock_dir;
  mode_t dir_mode = 0700;
  mode_t file_mode = 0600;
  std::mutex mutex;
  std::condition_variable released;
  // Keys held by a thread of this process, with the number of threads waiting.
  std::unordered_map<Key, int, KeyHash> held;  // value unused

  // Releases the thread lock of `key`.
  void release_thread(const Key& key) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex);
      held.erase(key);
    }
    released.notify_all();
  }
};

struct Lease::State {
  std::shared_ptr<SingleFlight::Impl> flight;
  util::Fd fd;                 // holds the OFD lock; invalid for thread-only leases
  std::filesystem::path path;  // the lock file
};

Lease::Lease(std::unique_ptr<State> state, Key key, bool waited) noexcept
    : m_state(std::move(state)), m_key(key), m_waited(waited) {}

Lease::~Lease() { release(); }

Lease::Lease(Lease&& other) noexcept
    : m_state(std::move(other.m_state)), m_key(other.m_key), m_waited(other.m_waited) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    m_state = std::move(other.m_state);
    m_key = other.m_key;
    m_waited = other.m_waited;
  }
  return *this;
}

bool Lease::held() const noexcept { return m_state != nullptr; }

void Lease::release() noexcept {
  if (!m_state) {
    return;
  }
  if (m_state->fd) {
    // Unlink while still holding the lock: an acquirer that locked the old
    // inode sees the path gone (or replaced) and retries on a fresh file.
    ::unlink(m_state->path.c_str());
    m_state->fd.reset();
  }
  m_state->flight->release_thread(m_key);
  m_state.reset();
}

SingleFlight::SingleFlight(std::filesystem::path lock_dir, unsigned dir_mode)
    : m_impl(std::make_shared<Impl>()) {
  m_impl->lock_dir = std::move(lock_dir);
  m_impl->dir_mode = static_cast<mode_t>(dir_mode);
  m_impl->file_mode = static_cast<mode_t>(dir_mode & 0666U);
  // The directory is made by the first acquire that needs it: a process that
  // only hits takes no process lock and creates nothing.
}

SingleFlight::~SingleFlight() = default;

LockScope SingleFlight::scope() const noexcept {
  return m_impl->lock_dir.empty() ? LockScope::threads : LockScope::threads_and_processes;
}

std::filesystem::path SingleFlight::lock_path(const Key& key) const {
  if (m_impl->lock_dir.empty()) {
    return {};
  }
  return m_impl->lock_dir / (key.hex() + ".lock");
}

namespace {

// Tries to take the write lock of `fd` without blocking: true when taken,
// false when another open file description holds it, an error otherwise.
Result<bool> try_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  for (;;) {
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      return true;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EACCES) {
      return false;
    }
    return make_errno_error(errno, "lock");
  }
}

}  // namespace

Result<Lease> SingleFlight::acquire(const Key& key, std::chrono::milliseconds timeout,
                                    const std::function<bool()>& stop_waiting) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  bool waited = false;

  // 1. The thread lock.
  {
    std::unique_lock<std::mutex> lock(m_impl->mutex);
    while (m_impl->held.count(key) != 0) {
      waited = true;
      if (m_impl->released.wait_until(lock, deadline) == std::cv_status::timeout &&
          m_impl->held.count(key) != 0) {
        return make_error(ErrorCode::timeout,
                          "waited " + std::to_string(timeout.count()) +
                              " ms for another thread compiling key " + key.hex());
      }
    }
    m_impl->held.emplace(key, 0);
  }
  auto state = std::make_unique<Lease::State>();
  state->flight = m_impl;
  if (m_impl->lock_dir.empty()) {
    return Lease(std::move(state), key, waited);
  }

  // 2. The process lock. On any failure below the thread lock is given back.
  auto give_back = [&](tl::unexpected<Error> err) -> Result<Lease> {
    m_impl->release_thread(key);
    return err;
  };
  state->path = lock_path(key);
  auto backoff = std::chrono::milliseconds(1);
  constexpr auto k_max_backoff = std::chrono::milliseconds(8);
  int made_dir = 0;
  for (;;) {
    util::Fd fd(::open(state->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, m_impl->file_mode));
    if (!fd && errno == ENOENT && made_dir++ < 100) {
      // No lock directory yet (or removed behind our back): make it,
      // missing parents too, and try again.
      std::error_code ec;
      if (std::filesystem::create_directories(m_impl->lock_dir, ec)) {
        ::chmod(m_impl->lock_dir.c_str(), m_impl->dir_mode);
      }
      continue;
    }
    if (!fd) {
      return give_back(make_errno_error(errno, "open lock file " + state->path.string()));
    }
    bool locked = false;
    for (;;) {
      auto got = try_lock(fd.get());
      if (!got) {
        return give_back(tl::unexpected(got.error()));
      }
      if (*got) {
        locked = true;
        break;
      }
      waited = true;
      if (Clock::now() >= deadline) {
        break;
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, k_max_backoff);
      if (stop_waiting && stop_waiting()) {
        m_impl->release_thread(key);
        return Lease(nullptr, key, true);
      }
      // A holder that finished unlinked this file: stop waiting on a dead inode.
      struct stat now {};
      struct stat mine {};
      if (::stat(state->path.c_str(), &now) != 0 || ::fstat(fd.get(), &mine) != 0 ||
          now.st_ino != mine.st_ino || now.st_dev != mine.st_dev) {
        break;
      }
    }
    if (locked) {
      struct stat now {};
      struct stat mine {};
      if (::fstat(fd.get(), &mine) == 0 && ::stat(state->path.c_str(), &now) == 0 &&
          now.st_ino == mine.st_ino && now.st_dev == mine.st_dev) {
        state->fd = std::move(fd);
        return Lease(std::move(state), key, waited);
      }
      // We locked an inode that its holder already unlinked: try the new file.
      waited = true;
    }
    if (Clock::now() >= deadline) {
      return give_back(make_error(ErrorCode::timeout,
                                  "waited " + std::to_string(timeout.count()) +
                                      " ms for another process compiling key " + key.hex()));
    }
  }
}

}  // namespace kcache
