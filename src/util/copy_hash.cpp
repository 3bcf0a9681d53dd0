// util/copy_hash.cpp: copy_and_xxh3 and its helper thread.
//
// The hand-over, per call (a Job lives on the caller's stack):
//   caller: posts the job (unless the helper is busy), copies chunk after
//           chunk, publishing `copied` after each (release);
//   helper: takes the job, hashes [hashed, copied) in pieces of at most k_piece
//           bytes, looking at `stop` between pieces;
//   caller: once everything is copied, takes the job back if the helper has not
//           taken it yet (and hashes it all), else sets `stop` and waits for
//           `done` (the helper lets go after its current piece), then hashes
//           what is left with the helper's state.
// `state` and `hashed` belong to the helper from the moment it takes the job
// until it sets `done` (release), and to the caller after (acquire).
//
// A split job (fill_and_chunk_digest): both threads claim chunk after chunk
// (`next`), fill each and hash it into its slot of `digests`; the caller,
// once no chunk is left to claim, takes the job back if the helper has not
// taken it yet, else waits for `done` (the helper finishes the chunk it holds
// and finds none left). The slots the helper wrote are the caller's after
// `done` (acquire).
#include "util/copy_hash.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/chunk_digest.hpp"
#include "util/sha256.hpp"

namespace kcache::util {

namespace {

// The copy publishes its progress in chunks; the helper hashes in pieces,
// small enough that it lets go soon after it is asked to.
constexpr std::size_t k_chunk = 128 * 1024;
constexpr std::size_t k_piece = 64 * 1024;

void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

struct Job {
  const char* data = nullptr;
  std::size_t size = 0;
  std::atomic<std::size_t> copied{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::size_t hashed = 0;
  Xxh3 state;
  // A split job only:
  bool split = false;
  char* dst = nullptr;
  const ChunkFill* fill = nullptr;
  std::uint64_t* digests = nullptr;
  std::size_t chunks = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<int> error{0};
};

// Claims the chunks of a split job one by one, fills and hashes each, until
// none is left or one fill failed (the first error is kept).
void work_split(Job& job) noexcept {
  while (job.error.load(std::memory_order_relaxed) == 0) {
    const std::size_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.chunks) {
      return;
    }
    const std::size_t offset = i * k_digest_chunk;
    const std::size_t n = std::min(k_digest_chunk, job.size - offset);
    if (const int e = (*job.fill)(job.dst + offset, offset, n); e != 0) {
      int none = 0;
      job.error.compare_exchange_strong(none, e, std::memory_order_relaxed);
      return;
    }
    job.digests[i] = xxh3_64(std::string_view(job.dst + offset, n));
  }
}

// Whether the helper is worth asking. On a machine whose cores are all busy
// the helper may take a job and then be preempted, and the caller waits for
// it to be scheduled again: a late helper (it had not started by the end of
// the copy, or it kept the caller waiting) makes the next calls hash on their
// own thread, for twice as many calls after each late one in a row (up to
// k_max_skip), until one is on time again.
constexpr auto k_late = std::chrono::microseconds(20);
// A split job's helper may be in the middle of a chunk (a 256 KiB read and its
// hash, ~30 us) when this thread finds none left: late only past a few chunks.
constexpr auto k_late_split = std::chrono::microseconds(150);
constexpr unsigned k_max_skip = 4096;

class Pace {
 public:
  // True when this call should not ask the helper.
  bool skip() noexcept {
    unsigned left = m_skip.load(std::memory_order_relaxed);
    while (left != 0 && !m_skip.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
    }
    return left != 0;
  }
  void record(bool late) noexcept {
    if (!late) {
      m_backoff.store(0, std::memory_order_relaxed);
      return;
    }
    const unsigned next = std::min(std::max(2 * m_backoff.load(std::memory_order_relaxed), 8U), k_max_skip);
    m_backoff.store(next, std::memory_order_relaxed);
    m_skip.store(next, std::memory_order_relaxed);
  }

 private:
  std::atomic<unsigned> m_skip{0};
  std::atomic<unsigned> m_backoff{0};
};

Pace g_pace;

// One helper thread per process. Thread-safety: thread-safe.
class Helper {
 public:
  Helper() : m_thread([this] { run(); }) {}
  ~Helper() {
    {
      std::lock_guard lock(m_mutex);
      m_quit = true;
    }
    m_wake.notify_one();
    m_thread.join();
  }
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  // Hands `job` to the helper; false when it is busy with another.
  bool post(Job* job) {
    {
      std::lock_guard lock(m_mutex);
      if (m_busy) {
        return false;
      }
      m_busy = true;
      m_job = job;
    }
    m_wake.notify_one();
    return true;
  }

  // Takes `job` back if the helper has not taken it yet.
  bool withdraw(Job* job) {
    std::lock_guard lock(m_mutex);
    if (m_job != job) {
      return false;
    }
    m_job = nullptr;
    m_busy = false;
    return true;
  }

 private:
  void run() {
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock lock(m_mutex);
        m_wake.wait(lock, [&] { return m_job != nullptr || m_quit; });
        if (m_quit) {
          return;
        }
        job = std::exchange(m_job, nullptr);
      }
      if (job->split) {
        work_split(*job);
        finish(job);
        continue;
      }
      std::size_t hashed = 0;
      unsigned idle = 0;
      while (hashed < job->size && !job->stop.load(std::memory_order_acquire)) {
        const std::size_t copied = job->copied.load(std::memory_order_acquire);
        if (copied == hashed) {
          // The copy is a few microseconds per chunk; a caller that was
          // preempted gets the core back instead of a spinning helper.
          if (++idle < 4096) {
            cpu_relax();
          } else {
            std::this_thread::yield();
          }
          continue;
        }
        idle = 0;
        const std::size_t n = std::min(copied - hashed, k_piece);
        job->state.update(job->data + hashed, n);
        hashed += n;
      }
      job->hashed = hashed;
      finish(job);
    }
  }

  void finish(Job* job) {
    {
      // Free for the next job before the caller may return (and post again).
      std::lock_guard lock(m_mutex);
      m_busy = false;
    }
    job->done.store(true, std::memory_order_release);
  }

  std::mutex m_mutex;
  std::condition_variable m_wake;
  Job* m_job = nullptr;
  bool m_busy = false;
  bool m_quit = false;
  std::thread m_thread;  // last: started once the members it uses exist
};

// The helper of this process, made on first use. Around fork() the lock is
// held, so that the child gets it unlocked and in a known state; the child has
// no thread of its parent's, so it forgets the parent's helper (without
// touching it: its own lock may have been held by its thread) and makes its own.
std::mutex g_helper_mutex;
std::unique_ptr<Helper> g_helper;

void lock_helper() noexcept { g_helper_mutex.lock(); }
void unlock_helper() noexcept { g_helper_mutex.unlock(); }
void forget_helper_in_child() noexcept {
  (void)g_helper.release();  // NOLINT(bugprone-unused-return-value): the parent's, left as it is
  g_helper_mutex.unlock();
}

Helper* helper() noexcept {
  static const bool registered = ::pthread_atfork(lock_helper, unlock_helper, forget_helper_in_child) == 0;
  if (!registered) {
    return nullptr;
  }
  try {
    std::lock_guard lock(g_helper_mutex);
    if (!g_helper) {
      g_helper = std::make_unique<Helper>();
    }
    return g_helper.get();
  } catch (...) {
    return nullptr;  // no thread to be had: hash on this thread
  }
}

// Takes a posted job back from the helper: withdrawn if it has not been taken
// yet, else `stop` is set and the helper's `done` awaited. The helper was late
// when it never took the job or kept this thread waiting longer than `late`.
void take_back(Helper* h, Job& job, std::chrono::microseconds late_after) noexcept {
  bool withdrawn = false;
  try {
    withdrawn = h->withdraw(&job);
  } catch (...) {
    withdrawn = false;
  }
  bool late = withdrawn;
  if (!withdrawn) {
    job.stop.store(true, std::memory_order_release);
    const auto since = std::chrono::steady_clock::now();
    for (unsigned spins = 0; !job.done.load(std::memory_order_acquire); ++spins) {
      if (spins < 1024) {
        cpu_relax();
      } else {
        std::this_thread::yield();  // the helper was preempted: let it finish its piece
      }
    }
    late = std::chrono::steady_clock::now() - since > late_after;
  }
  g_pace.record(late);
}

// Posts `job` to the helper unless the pace says not to; the helper, or null.
Helper* post_job(Job& job) noexcept {
  if (g_pace.skip()) {
    return nullptr;
  }
  Helper* h = helper();
  try {
    return h != nullptr && h->post(&job) ? h : nullptr;
  } catch (...) {
    return nullptr;
  }
}

// A fill that copies from `src` (copy_and_xxh3, copy_and_chunk_digest).
ChunkFill copy_from(const char* src) {
  return [src](char* to, std::size_t offset, std::size_t n) noexcept {
    std::memcpy(to, src + offset, n);
    return 0;
  };
}

}  // namespace

std::uint64_t copy_and_xxh3(char* dst, const char* src, std::size_t size) noexcept {
  int error = 0;
  return fill_and_xxh3(dst, size, copy_from(src), error);
}

std::uint64_t fill_and_xxh3(char* dst, std::size_t size, const ChunkFill& fill, int& error) noexcept {
  error = 0;
  Job job;
  job.data = dst;
  job.size = size;
  Helper* const h = size >= k_copy_hash_parallel_min ? post_job(job) : nullptr;
  const bool posted = h != nullptr;
  for (std::size_t done = 0; done < size; done += k_chunk) {
    const std::size_t n = std::min(k_chunk, size - done);
    if ((error = fill(dst + done, done, n)) != 0) {
      break;  // the helper is stopped below; the digest is not wanted
    }
    job.copied.store(done + n, std::memory_order_release);
  }
  if (posted) {
    take_back(h, job, k_late);
  }
  if (error != 0) {
    return 0;
  }
  job.state.update(dst + job.hashed, size - job.hashed);
  return job.state.digest();
}

std::uint64_t fill_and_chunk_digest(char* dst, std::size_t size, const ChunkFill& fill, int& error) noexcept {
  if (size < k_chunked_digest_min) {
    return fill_and_xxh3(dst, size, fill, error);
  }
  error = 0;
  const std::size_t chunks = (size + k_digest_chunk - 1) / k_digest_chunk;
  std::unique_ptr<std::uint64_t[]> digests;
  try {
    digests = std::make_unique_for_overwrite<std::uint64_t[]>(chunks);
  } catch (...) {
    // No memory for the slots: one chunk after another on this thread.
    ChunkDigest d(size);
    for (std::size_t done = 0; done < size; done += k_digest_chunk) {
      const std::size_t n = std::min(k_digest_chunk, size - done);
      if ((error = fill(dst + done, done, n)) != 0) {
        return 0;
      }
      d.update(dst + done, n);
    }
    return d.digest();
  }
  Job job;
  job.split = true;
  job.size = size;
  job.dst = dst;
  job.fill = &fill;
  job.digests = digests.get();
  job.chunks = chunks;
  Helper* const h = post_job(job);
  work_split(job);
  if (h != nullptr) {
    // The helper holds at most one chunk when this thread finds none left.
    take_back(h, job, k_late_split);
  }
  if ((error = job.error.load(std::memory_order_relaxed)) != 0) {
    return 0;
  }
  return combine_chunk_digests(digests.get(), chunks, size);
}

std::uint64_t copy_and_chunk_digest(char* dst, const char* src, std::size_t size) noexcept {
  int error = 0;
  return fill_and_chunk_digest(dst, size, copy_from(src), error);
}

}  // namespace kcache::util
