#include "store/shared_counters.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "util/fd.hpp"
#include "util/posix_io.hpp"

namespace kcache::store {

namespace {

constexpr char k_magic[8] = {'K', 'C', 'C', 'N', 'T', '0', '0', '1'};
constexpr std::uint32_t k_version = 1;
constexpr std::size_t k_header_words = 8;
constexpr std::size_t k_total_words = SharedCounters::k_file_size / 8;
constexpr const char* k_name = "counters";

bool header_ok(const void* mapped) {
  const auto* bytes = static_cast<const unsigned char*>(mapped);
  std::uint32_t version = 0;
  std::uint32_t shards = 0;
  std::memcpy(&version, bytes + 8, 4);
  std::memcpy(&shards, bytes + 12, 4);
  return std::memcmp(bytes, k_magic, 8) == 0 && version == k_version &&
         shards == SharedCounters::k_shards;
}

std::string initial_image() {
  std::string image(SharedCounters::k_file_size, '\0');
  std::memcpy(image.data(), k_magic, 8);
  std::memcpy(image.data() + 8, &k_version, 4);
  const std::uint32_t shards = SharedCounters::k_shards;
  std::memcpy(image.data() + 12, &shards, 4);
  return image;
}

// Writes a fresh, fully allocated counters file (no holes: a store into a hole
// of a full filesystem would SIGBUS) and links it in place. With `replace`, a
// damaged file is replaced; otherwise an existing file wins.
bool create_file(int dir_fd, mode_t mode, bool replace) {
  std::random_device rd;
  const std::string tmp = std::string(".counters-") + std::to_string(::getpid()) + "-" +
                          std::to_string(rd()) + ".tmp";
  util::Fd fd(util::io::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode));
  if (!fd) {
    return false;
  }
  bool ok = util::io::fchmod(fd.get(), mode) == 0 && util::io::write_all(fd.get(), initial_image()) == 0 &&
            util::io::fsync(fd.get()) == 0;
  if (ok) {
    if (replace) {
      ok = util::io::renameat(dir_fd, tmp.c_str(), dir_fd, k_name) == 0;
    } else {
      ok = util::io::linkat(dir_fd, tmp.c_str(), dir_fd, k_name, 0) == 0 || errno == EEXIST;
    }
  }
  util::io::unlinkat(dir_fd, tmp.c_str(), 0);
  return ok;
}

void* map_file(int dir_fd) {
  util::Fd fd(util::io::openat(dir_fd, k_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    return nullptr;
  }
  struct stat st {};
  if (util::io::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != SharedCounters::k_file_size) {
    return nullptr;
  }
  void* p = ::mmap(nullptr, SharedCounters::k_file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return nullptr;
  }
  if (!header_ok(p)) {
    ::munmap(p, SharedCounters::k_file_size);
    return nullptr;
  }
  return p;
}

std::int64_t load_signed(const std::uint64_t* w) noexcept {
  return static_cast<std::int64_t>(std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(w)).load(
      std::memory_order_relaxed));
}

}  // namespace

std::unique_ptr<SharedCounters> SharedCounters::open(int stats_dir_fd, mode_t mode) {
  std::unique_ptr<SharedCounters> c(new SharedCounters());
  c->m_mapped = map_file(stats_dir_fd);
  if (c->m_mapped == nullptr) {
    struct stat st {};
    const bool exists = util::io::fstatat(stats_dir_fd, k_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (create_file(stats_dir_fd, mode, exists)) {
      c->m_mapped = map_file(stats_dir_fd);
      c->m_fresh = c->m_mapped != nullptr;
    }
  }
  if (c->m_mapped == nullptr) {
    c->m_local = std::make_unique<std::uint64_t[]>(k_total_words);
    c->m_fresh = true;
  }
  return c;
}

SharedCounters::~SharedCounters() {
  if (m_mapped != nullptr) {
    ::munmap(m_mapped, k_file_size);
  }
}

std::uint64_t* SharedCounters::word(std::size_t index) const noexcept {
  if (m_mapped != nullptr) {
    return static_cast<std::uint64_t*>(m_mapped) + index;
  }
  return m_local.get() + index;
}

void SharedCounters::add(Counter counter, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(k_header_words + static_cast<unsigned>(counter)))
      .fetch_add(value, std::memory_order_relaxed);
}

std::uint64_t SharedCounters::get(Counter counter) const noexcept {
  return std::atomic_ref<std::uint64_t>(*word(k_header_words + static_cast<unsigned>(counter)))
      .load(std::memory_order_relaxed);
}

namespace {
constexpr std::size_t shard_word(unsigned shard) {
  return k_header_words + SharedCounters::k_counter_slots + std::size_t{shard} * 2;
}
}  // namespace

void SharedCounters::shard_add(unsigned shard, std::int64_t bytes, std::int64_t entries) noexcept {
  std::atomic_ref<std::uint64_t>(*word(shard_word(shard))).fetch_add(static_cast<std::uint64_t>(bytes));
  std::atomic_ref<std::uint64_t>(*word(shard_word(shard) + 1)).fetch_add(static_cast<std::uint64_t>(entries));
}

void SharedCounters::shard_set(unsigned shard, std::int64_t bytes, std::int64_t entries) noexcept {
  std::atomic_ref<std::uint64_t>(*word(shard_word(shard))).store(static_cast<std::uint64_t>(bytes));
  std::atomic_ref<std::uint64_t>(*word(shard_word(shard) + 1)).store(static_cast<std::uint64_t>(entries));
}

std::uint64_t SharedCounters::shard_bytes(unsigned shard) const noexcept {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, load_signed(word(shard_word(shard)))));
}

std::uint64_t SharedCounters::shard_entries(unsigned shard) const noexcept {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, load_signed(word(shard_word(shard) + 1))));
}

std::uint64_t SharedCounters::total_bytes() const noexcept {
  std::uint64_t sum = 0;
  for (unsigned s = 0; s < k_shards; ++s) {
    sum += shard_bytes(s);
  }
  return sum;
}

std::uint64_t SharedCounters::total_entries() const noexcept {
  std::uint64_t sum = 0;
  for (unsigned s = 0; s < k_shards; ++s) {
    sum += shard_entries(s);
  }
  return sum;
}

}  // namespace kcache::store
