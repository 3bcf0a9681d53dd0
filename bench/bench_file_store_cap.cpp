// bench_file_store_cap: do W processes writing under one cap keep the disk
// within 1.1x of it, whatever the entry size? Each writer process puts entries
// as fast as it can while the parent measures the bytes on disk (payloads,
// passports, staged temp files and the metadata under v1/stats). Arguments:
// writers, entry size, cap; each writer writes 4x the cap (issue 13 item 3:
// entries up to 1/16 of the cap, 8 and 32 writers).
//
// Three measurements of the disk, each as a multiple of the cap (counters):
//
//   peak_stopped_over_cap  exact: every few milliseconds the parent stops every
//                          writer (SIGSTOP, and waits until each has stopped),
//                          sums the file sizes under v1/, and lets them go on.
//                          Each sample is an exact, consistent figure in the
//                          cap's own unit (bytes of file contents); the peak is
//                          the largest such sample (stopped_samples_over_cap:
//                          how many were above the cap).
//   peak_pages_over_cap    exact at every instant it looks: the cache lives in
//                          a private tmpfs (mounted in a mount namespace of its
//                          own, so nothing else writes there) whose used blocks
//                          the parent reads with statvfs in a tight loop. tmpfs
//                          counts whole pages per file and nothing for
//                          directories, so this is the page use, which exceeds
//                          the byte count by each file's last partial page (a
//                          600-byte passport takes 4 KiB).
//   peak_pages_over_full   the same peak over the pages that a cache filled to
//                          its cap with these entries takes (the metadata's
//                          pages, measured before the writers start, plus the
//                          entries' page use per byte, measured after the run):
//                          1.0 means "as many pages as a full cache", so page
//                          rounding cancels out. (Staged files count at most
//                          the pages per byte of a complete entry: a staged
//                          payload without its passport counts fewer.)
//   peak_walk_over_cap     the old sampler: a directory walk every 2 ms while
//                          the writers run. Not atomic: an entry evicted after
//                          its shard was summed whose space a new temp file
//                          takes before v1/tmp is summed counts twice, so this
//                          is an upper estimate.
//   peak_accounted_over_cap  the largest published size the store's counters showed.
//   final_over_cap         bytes on disk after the last writer exited.
//
//   build/ci/bench/bench_file_store_cap
//   KCACHE_BENCH_DIR=/path/on/the/disk/to/measure (default: a private tmpfs when
//   this process may mount one, else $TMPDIR or /tmp; the page figures need the tmpfs)
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kcache/file_store.hpp"
#include "kcache/key_builder.hpp"
#include "support/disk_usage.hpp"

namespace {

using namespace kcache;
using Clock = std::chrono::steady_clock;

// The private tmpfs the cache lives in, or empty (with why_not) when none.
struct BenchDisk {
  std::filesystem::path tmpfs;
  std::string why_not;
};
BenchDisk g_disk;

bool write_file(const char* path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

// Mounts a tmpfs in a mount namespace of this process (and the writers it
// forks), unprivileged through a user namespace where needed. REQUIRES: one
// thread (unshare(CLONE_NEWUSER) refuses a threaded process).
BenchDisk mount_private_tmpfs() {
  if (std::getenv("KCACHE_BENCH_DIR") != nullptr) {
    return {{}, "KCACHE_BENCH_DIR is set: measuring there"};
  }
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  const int flags = uid == 0 ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS;
  if (::unshare(flags) != 0) {
    return {{}, std::string("unshare: ") + std::strerror(errno)};
  }
  if (uid != 0 && !(write_file("/proc/self/setgroups", "deny") &&
                    write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") &&
                    write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))) {
    return {{}, "cannot map this user into a user namespace"};
  }
  // Keep the mount out of the parent namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return {{}, std::string("mount --make-rprivate /: ") + std::strerror(errno)};
  }
  std::string dir = (std::filesystem::temp_directory_path() / "kcache-bench-tmpfs-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    return {{}, std::string("mkdtemp: ") + std::strerror(errno)};
  }
  if (::mount("kcache-bench", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=0700") != 0) {
    const int e = errno;
    ::rmdir(dir.c_str());
    return {{}, std::string("mount -t tmpfs: ") + std::strerror(e)};
  }
  return {dir, {}};
}

void unmount_private_tmpfs() {
  if (!g_disk.tmpfs.empty()) {
    ::umount2(g_disk.tmpfs.c_str(), MNT_DETACH);
    ::rmdir(g_disk.tmpfs.c_str());
  }
}

std::filesystem::path bench_root() {
  if (!g_disk.tmpfs.empty()) {
    return g_disk.tmpfs / "cache";
  }
  const char* base = std::getenv("KCACHE_BENCH_DIR");
  if (base == nullptr) {
    base = std::getenv("TMPDIR");
  }
  return std::filesystem::path(base != nullptr ? base : "/tmp") /
         ("kcache-bench-cap-" + std::to_string(::getpid()));
}

// Bytes of the tmpfs's used blocks (whole pages), or 0 without the tmpfs.
std::uint64_t pages_in_use() {
  struct statvfs vfs {};
  if (g_disk.tmpfs.empty() || ::statvfs(g_disk.tmpfs.c_str(), &vfs) != 0) {
    return 0;
  }
  return static_cast<std::uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
}

Artifact artifact(std::uint64_t seed, std::size_t size) {
  std::string payload(size, '\0');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(payload.data() + i, &x, std::min<std::size_t>(8, size - i));
  }
  return Artifact::make(KeyBuilder("bench").add("seed", static_cast<std::int64_t>(seed)), "blob",
                        std::move(payload));
}

// The writer processes; a pid of -1 is one that has exited and been reaped.
class Writers {
 public:
  void add(pid_t pid) { m_pids.push_back(pid); ++m_running; }
  int running() const { return m_running; }

  void reap() {
    for (auto& pid : m_pids) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        --m_running;
      }
    }
  }

  // Sums the bytes on disk with every writer stopped, so that nothing changes
  // during the walk.
  std::uint64_t bytes_with_writers_stopped(const std::filesystem::path& root) {
    std::vector<pid_t> stopped;
    for (auto& pid : m_pids) {
      if (pid > 0 && ::kill(pid, SIGSTOP) == 0) {
        stopped.push_back(pid);
      }
    }
    for (auto& pid : m_pids) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WUNTRACED) == pid && !WIFSTOPPED(status)) {
        pid = -1;  // it exited before the stop took hold
        --m_running;
      }
    }
    const std::uint64_t bytes = kcache::test::bytes_under_cap(root);
    for (const pid_t pid : stopped) {
      ::kill(pid, SIGCONT);
    }
    return bytes;
  }

 private:
  std::vector<pid_t> m_pids;
  int m_running = 0;
};

double over(std::uint64_t bytes, std::uint64_t cap) { return static_cast<double>(bytes) / static_cast<double>(cap); }

void BM_WritersUnderOneCap(benchmark::State& state) {
  const int writers = static_cast<int>(state.range(0));
  const auto entry_size = static_cast<std::size_t>(state.range(1));
  const auto cap = static_cast<std::uint64_t>(state.range(2));
  const int puts_per_writer = static_cast<int>(4 * cap / entry_size);  // each writer alone writes 4x the cap
  const auto root = bench_root();
  FileStoreOptions options;
  options.root = root;
  options.max_size_bytes = cap;
  options.warn = [](const std::string&) {};
  for (auto _ : state) {
    std::filesystem::remove_all(root);
    const std::uint64_t pages_before = pages_in_use();  // 0 on an empty tmpfs
    { auto created = FileStore::open(options); }
    // The metadata alone (stats/counters and stats/checks), in bytes and pages.
    const std::uint64_t meta_bytes = kcache::test::bytes_under_cap(root);
    const std::uint64_t meta_pages = pages_in_use() - pages_before;
    Writers children;
    for (int w = 0; w < writers; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        auto store = FileStore::open(options);
        if (!store) {
          ::_exit(2);
        }
        for (int i = 0; i < puts_per_writer; ++i) {
          (void)(*store)->put(artifact(static_cast<std::uint64_t>(w) * 1'000'000 + i, entry_size));
        }
        ::_exit(0);
      }
      children.add(pid);
    }
    std::uint64_t peak_walk = 0;
    std::uint64_t peak_stopped = 0;
    std::uint64_t peak_pages = 0;
    std::uint64_t peak_accounted = 0;
    std::uint64_t stopped_samples = 0;
    std::uint64_t stopped_over_cap = 0;
    auto observer = FileStore::open(options);
    auto next_walk = Clock::now();
    auto next_stop = Clock::now();
    while (children.running() > 0) {
      // statvfs is one cheap, atomic read: look as often as the CPU allows.
      peak_pages = std::max(peak_pages, pages_in_use() - pages_before);
      const auto now = Clock::now();
      if (now >= next_walk) {
        peak_walk = std::max(peak_walk, kcache::test::bytes_under_cap(root));
        if (observer) {
          peak_accounted = std::max(peak_accounted, (*observer)->stats()->size_bytes);
        }
        children.reap();
        next_walk = now + std::chrono::milliseconds(2);
      }
      if (now >= next_stop) {
        const std::uint64_t bytes = children.bytes_with_writers_stopped(root);
        peak_stopped = std::max(peak_stopped, bytes);
        ++stopped_samples;
        stopped_over_cap += bytes > cap ? 1 : 0;
        next_stop = Clock::now() + std::chrono::milliseconds(5);
      }
      ::sched_yield();
    }
    const std::uint64_t final_bytes = kcache::test::bytes_under_cap(root);
    const std::uint64_t final_pages = pages_in_use() - pages_before;
    state.counters["peak_stopped_over_cap"] = over(peak_stopped, cap);
    state.counters["peak_walk_over_cap"] = over(peak_walk, cap);
    state.counters["peak_accounted_over_cap"] = over(peak_accounted, cap);
    state.counters["final_over_cap"] = over(final_bytes, cap);
    state.counters["stopped_samples"] = static_cast<double>(stopped_samples);
    state.counters["stopped_samples_over_cap"] = static_cast<double>(stopped_over_cap);
    if (!g_disk.tmpfs.empty() && final_bytes > meta_bytes && final_pages > meta_pages) {
      // Pages per byte of these entries as the cache holds them at rest; a
      // cache filled to its cap holds the metadata's pages plus that many
      // pages per byte of the rest of the cap.
      const double pages_per_byte =
          static_cast<double>(final_pages - meta_pages) / static_cast<double>(final_bytes - meta_bytes);
      const double full_pages = static_cast<double>(meta_pages) + pages_per_byte * static_cast<double>(cap - meta_bytes);
      state.counters["peak_pages_over_cap"] = over(peak_pages, cap);
      state.counters["peak_pages_over_full"] = static_cast<double>(peak_pages) / full_pages;
      state.counters["final_pages_over_cap"] = over(final_pages, cap);
    }
    state.counters["puts"] = static_cast<double>(writers * puts_per_writer);
  }
  std::filesystem::remove_all(root);
}
BENCHMARK(BM_WritersUnderOneCap)
    ->ArgNames({"writers", "entry", "cap"})
    ->Args({8, 64 << 10, 8 << 20})   // the original case: entries 1/128 of the cap
    ->Args({8, 1 << 10, 1 << 20})    // small entries under a small cap
    ->Args({8, 16 << 10, 1 << 20})   // 1/64
    ->Args({8, 64 << 10, 1 << 20})   // 1/16
    ->Args({32, 1 << 10, 1 << 20})
    ->Args({32, 16 << 10, 1 << 20})
    ->Args({32, 64 << 10, 1 << 20})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  g_disk = mount_private_tmpfs();
  if (g_disk.tmpfs.empty()) {
    std::fprintf(stderr, "bench_file_store_cap: no private tmpfs (%s); no page figures\n", g_disk.why_not.c_str());
  } else {
    std::fprintf(stderr, "bench_file_store_cap: the cache lives in a private tmpfs at %s\n", g_disk.tmpfs.c_str());
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  unmount_private_tmpfs();
  return 0;
}
