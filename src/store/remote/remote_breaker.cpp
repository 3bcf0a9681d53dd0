#include "store/remote/remote_breaker.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "util/fd.hpp"
#include "util/sha256.hpp"
#include "util/unique_name.hpp"

namespace kcache::remote {

namespace {

constexpr char k_magic[8] = {'K', 'C', 'B', 'R', 'K', '0', '0', '1'};
constexpr std::uint32_t k_version = 1;
constexpr std::size_t k_server_offset = 16;
constexpr std::size_t k_server_size = 256;
constexpr std::size_t k_state_offset = k_server_offset + k_server_size;  // 272
constexpr unsigned k_state_words = 8;
constexpr std::size_t k_counters_offset = k_state_offset + 8 * k_state_words;  // 336
static_assert(k_counters_offset + 8 * RemoteCounters::k_words <= RemoteBreaker::k_file_size);
static_assert(k_state_offset % 8 == 0);

enum Word : unsigned { failures, open_until, probe_until, opened, last_failure, last_success };

// The bytes of a fresh file for `server`.
std::string fresh_file(const std::string& server) {
  std::string bytes(RemoteBreaker::k_file_size, '\0');
  std::memcpy(bytes.data(), k_magic, 8);
  const std::uint32_t header[2] = {k_version, static_cast<std::uint32_t>(RemoteBreaker::k_file_size)};
  std::memcpy(bytes.data() + 8, header, sizeof header);
  std::memcpy(bytes.data() + k_server_offset, server.data(), std::min(server.size(), k_server_size - 1));
  return bytes;
}

bool header_ok(const unsigned char* bytes) {
  const std::uint32_t header[2] = {k_version, static_cast<std::uint32_t>(RemoteBreaker::k_file_size)};
  return std::memcmp(bytes, k_magic, 8) == 0 && std::memcmp(bytes + 8, header, sizeof header) == 0;
}

// Writes a fresh file beside `path` and renames it over `path` (a damaged
// file is replaced; a race with another creator leaves one good file).
bool rebuild(const std::filesystem::path& path, const std::string& server, mode_t mode) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + util::temp_suffix();
  util::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) {
    return false;
  }
  const std::string bytes = fresh_file(server);
  const bool ok = ::write(fd.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) &&
                  ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp.c_str());
  }
  return ok;
}

// Maps `path` when it is a regular file of the right size and header.
void* map_file(const std::filesystem::path& path, bool writable) {
  util::Fd fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size != static_cast<off_t>(RemoteBreaker::k_file_size)) {
    return nullptr;
  }
  void* m = ::mmap(nullptr, RemoteBreaker::k_file_size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                   fd.get(), 0);
  if (m == MAP_FAILED) {
    return nullptr;
  }
  if (!header_ok(static_cast<const unsigned char*>(m))) {
    ::munmap(m, RemoteBreaker::k_file_size);
    return nullptr;
  }
  return m;
}

std::atomic_ref<std::uint64_t> at(std::uint64_t* w) { return std::atomic_ref<std::uint64_t>(*w); }

}  // namespace

std::uint64_t RemoteBreaker::now_ms() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

std::string RemoteBreaker::server_name(const RemoteSpec& spec) {
  switch (spec.scheme) {
    case Scheme::redis: return fmt::format("redis://{}:{}/{}", spec.host, spec.port, spec.db);
    case Scheme::redis_unix: return fmt::format("redis+unix://{}?db={}", spec.path, spec.db);
    case Scheme::redis_cluster: return fmt::format("redis+cluster://{}", spec.host);
    case Scheme::http: return fmt::format("http://{}:{}{}", spec.host, spec.port, spec.path);
    case Scheme::https: return fmt::format("https://{}:{}{}", spec.host, spec.port, spec.path);
    case Scheme::s3: return fmt::format("s3://{}{}?endpoint={}", spec.host, spec.path, spec.endpoint);
  }
  return spec.masked();
}

std::string RemoteBreaker::file_name(const RemoteSpec& spec) {
  return "remote-" + util::sha256_hex(server_name(spec)).substr(0, 16);
}

std::shared_ptr<RemoteBreaker> RemoteBreaker::open(const std::filesystem::path& stats_dir, const RemoteSpec& spec,
                                                   bool group_shared) {
  // One breaker per (directory, server) in a process: the data tier and the
  // lease of one remote see the same state even where no file can be shared.
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<RemoteBreaker>> open_breakers;
  const std::string server = server_name(spec);
  const std::filesystem::path path = stats_dir.empty() ? std::filesystem::path() : stats_dir / file_name(spec);
  std::unique_lock lock(mutex, std::defer_lock);
  if (!path.empty()) {
    lock.lock();
    if (auto b = open_breakers[path.string()].lock()) {
      return b;
    }
  }
  std::shared_ptr<RemoteBreaker> b(new RemoteBreaker());
  b->m_server = server;
  if (!path.empty()) {
    const mode_t mode = group_shared ? 0660 : 0600;
    b->m_mapped = map_file(path, true);
    if (b->m_mapped == nullptr && rebuild(path, server, mode)) {
      b->m_mapped = map_file(path, true);
    }
  }
  if (b->m_mapped == nullptr) {
    b->m_local = std::make_unique<std::uint64_t[]>(k_file_size / 8);
  }
  b->m_counters = RemoteCounters::over(b->word(0) + (k_counters_offset - k_state_offset) / 8, b->shared());
  if (!path.empty()) {
    open_breakers[path.string()] = b;
  }
  return b;
}

std::unique_ptr<RemoteBreaker> RemoteBreaker::open_for_reading(const std::filesystem::path& file) {
  void* m = map_file(file, false);
  if (m == nullptr) {
    return nullptr;
  }
  std::unique_ptr<RemoteBreaker> b(new RemoteBreaker());
  b->m_mapped = m;
  const char* name = static_cast<const char*>(m) + k_server_offset;
  b->m_server.assign(name, strnlen(name, k_server_size));
  b->m_counters = RemoteCounters::over(b->word(0) + (k_counters_offset - k_state_offset) / 8, true);
  return b;
}

std::vector<std::unique_ptr<RemoteBreaker>> RemoteBreaker::open_all_for_reading(const std::filesystem::path& stats_dir) {
  std::vector<std::unique_ptr<RemoteBreaker>> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(stats_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("remote-", 0) != 0 || name.find('.') != std::string::npos) {
      continue;  // other files, temporaries (remote-<id>.tmp-*), an old aggregate "remote" file
    }
    if (auto b = open_for_reading(e.path())) {
      out.push_back(std::move(b));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->server() < b->server(); });
  return out;
}

RemoteBreaker::~RemoteBreaker() {
  m_counters.reset();
  if (m_mapped != nullptr) {
    ::munmap(m_mapped, k_file_size);
  }
}

std::uint64_t* RemoteBreaker::word(unsigned index) const noexcept {
  if (m_mapped != nullptr) {
    return reinterpret_cast<std::uint64_t*>(static_cast<unsigned char*>(m_mapped) + k_state_offset) + index;
  }
  return m_local.get() + index;
}

BreakerAdmit RemoteBreaker::admit(const BreakerPolicy& policy) noexcept {
  const std::uint64_t until = at(word(open_until)).load(std::memory_order_acquire);
  if (until == 0) {
    return BreakerAdmit::closed;
  }
  const std::uint64_t now = now_ms();
  const std::uint64_t open_ms = std::uint64_t{policy.seconds} * 1000;
  if (now < until && until - now <= open_ms) {
    return BreakerAdmit::open;
  }
  // Half-open: one caller, in any process, claims the probe.
  std::uint64_t probe = at(word(probe_until)).load(std::memory_order_acquire);
  if (probe != 0 && now < probe && probe - now <= policy.probe_ms) {
    return BreakerAdmit::open;
  }
  if (at(word(probe_until)).compare_exchange_strong(probe, now + policy.probe_ms, std::memory_order_acq_rel)) {
    return BreakerAdmit::probe;
  }
  return BreakerAdmit::open;
}

void RemoteBreaker::succeeded() noexcept {
  // Cheap when already closed: no write to a shared cache line on every hit.
  if (at(word(failures)).load(std::memory_order_relaxed) != 0) {
    at(word(failures)).store(0, std::memory_order_relaxed);
  }
  if (at(word(open_until)).load(std::memory_order_relaxed) != 0) {
    at(word(open_until)).store(0, std::memory_order_release);
    at(word(probe_until)).store(0, std::memory_order_release);
    at(word(last_success)).store(now_ms(), std::memory_order_relaxed);
  }
}

bool RemoteBreaker::failed(const BreakerPolicy& policy, bool hung) noexcept {
  const std::uint64_t now = now_ms();
  const std::uint64_t n = at(word(failures)).fetch_add(1, std::memory_order_acq_rel) + 1;
  at(word(last_failure)).store(now, std::memory_order_relaxed);
  bool opened_now = false;
  if (policy.failures > 0 && (hung || n >= policy.failures)) {
    const std::uint64_t prev =
        at(word(open_until)).exchange(now + std::uint64_t{policy.seconds} * 1000, std::memory_order_acq_rel);
    if (prev == 0 || prev <= now) {
      at(word(opened)).fetch_add(1, std::memory_order_relaxed);
      opened_now = true;
    }
  }
  // A failed probe (or any failure) ends the probe in flight: the next caller
  // after the new open time probes again.
  at(word(probe_until)).store(0, std::memory_order_release);
  return opened_now;
}

BreakerState RemoteBreaker::state() const noexcept {
  BreakerState s;
  s.failures = at(word(failures)).load(std::memory_order_relaxed);
  s.open_until_ms = at(word(open_until)).load(std::memory_order_relaxed);
  s.probe_until_ms = at(word(probe_until)).load(std::memory_order_relaxed);
  s.opened = at(word(opened)).load(std::memory_order_relaxed);
  s.last_failure_ms = at(word(last_failure)).load(std::memory_order_relaxed);
  s.last_success_ms = at(word(last_success)).load(std::memory_order_relaxed);
  return s;
}

}  // namespace kcache::remote
