#include "store/remote/remote_counters.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstring>

#include "util/fd.hpp"

namespace kcache::remote {

namespace {
constexpr char k_magic[8] = {'K', 'C', 'R', 'M', 'T', '0', '0', '1'};
constexpr unsigned k_buckets = 32;
static_assert(static_cast<unsigned>(RemoteCounter::count_) <= RemoteCounters::k_words);
}  // namespace

std::unique_ptr<RemoteCounters> RemoteCounters::open(const std::filesystem::path& stats_dir, bool group_shared) {
  std::unique_ptr<RemoteCounters> c(new RemoteCounters());
  const auto path = stats_dir / "remote";
  util::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, group_shared ? 0660 : 0600));
  struct stat st {};
  if (fd && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
      (st.st_size == static_cast<off_t>(k_file_size) ||
       (st.st_size == 0 && ::ftruncate(fd.get(), static_cast<off_t>(k_file_size)) == 0))) {
    void* m = ::mmap(nullptr, k_file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (m != MAP_FAILED) {
      auto* bytes = static_cast<unsigned char*>(m);
      std::uint32_t header[2] = {1, k_words};
      static const unsigned char zero[16] = {};
      if (std::memcmp(bytes, zero, 16) == 0) {
        // New file: every creator writes the same header, so a race is harmless.
        std::memcpy(bytes + 8, header, sizeof header);
        std::memcpy(bytes, k_magic, 8);
      }
      if (std::memcmp(bytes, k_magic, 8) == 0 && std::memcmp(bytes + 8, header, sizeof header) == 0) {
        c->m_mapped = m;
        c->m_words = reinterpret_cast<std::uint64_t*>(bytes + 16);
        c->m_shared = true;
        return c;
      }
      ::munmap(m, k_file_size);
    }
  }
  c->m_local = std::make_unique<std::uint64_t[]>(k_words);
  c->m_words = c->m_local.get();
  return c;
}

std::unique_ptr<RemoteCounters> RemoteCounters::over(std::uint64_t* words, bool shared) {
  std::unique_ptr<RemoteCounters> c(new RemoteCounters());
  c->m_words = words;
  c->m_shared = shared;
  return c;
}

RemoteCounters::~RemoteCounters() {
  if (m_mapped != nullptr) {
    ::munmap(m_mapped, k_file_size);
  }
}

void RemoteCounters::add(RemoteCounter counter, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(static_cast<unsigned>(counter))).fetch_add(value, std::memory_order_relaxed);
}

std::uint64_t RemoteCounters::get(RemoteCounter counter) const noexcept {
  return std::atomic_ref<std::uint64_t>(*word(static_cast<unsigned>(counter))).load(std::memory_order_relaxed);
}

void RemoteCounters::add_latency(std::uint64_t us) noexcept {
  const unsigned bucket = us == 0 ? 0 : std::min<unsigned>(k_buckets - 1, static_cast<unsigned>(std::bit_width(us)) - 1);
  add(static_cast<RemoteCounter>(static_cast<unsigned>(RemoteCounter::latency_0) + bucket));
}

std::uint64_t RemoteCounters::latency_quantile(double q) const noexcept {
  std::array<std::uint64_t, k_buckets> h{};
  std::uint64_t total = 0;
  for (unsigned i = 0; i < k_buckets; ++i) {
    h[i] = get(static_cast<RemoteCounter>(static_cast<unsigned>(RemoteCounter::latency_0) + i));
    total += h[i];
  }
  if (total == 0) {
    return 0;
  }
  const auto want = static_cast<std::uint64_t>(q * static_cast<double>(total - 1)) + 1;
  std::uint64_t seen = 0;
  for (unsigned i = 0; i < k_buckets; ++i) {
    seen += h[i];
    if (seen >= want) {
      return std::uint64_t{2} << i;  // upper bound of [2^i, 2^(i+1))
    }
  }
  return std::uint64_t{2} << (k_buckets - 1);
}

}  // namespace kcache::remote
