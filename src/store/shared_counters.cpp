#include "store/shared_counters.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "store/shared_file.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"

namespace kcache::store {

namespace {

constexpr std::size_t k_header_words = 8;
constexpr std::size_t k_total_words = SharedCounters::k_file_size / 8;
constexpr SharedFileFormat k_format{"counters", {'K', 'C', 'C', 'N', 'T', '0', '0', '1'}, 1,
                                    SharedCounters::k_shards, SharedCounters::k_file_size};

std::int64_t load_signed(const std::uint64_t* w) noexcept {
  return static_cast<std::int64_t>(std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(w)).load(
      std::memory_order_relaxed));
}

}  // namespace

std::unique_ptr<SharedCounters> SharedCounters::open(int stats_dir_fd, mode_t mode) {
  std::unique_ptr<SharedCounters> c(new SharedCounters());
  const MappedSharedFile mapped = map_shared_file(stats_dir_fd, k_format, mode);
  c->m_mapped = mapped.data;
  c->m_fresh = mapped.fresh;
  if (c->m_mapped == nullptr) {
    c->m_local = std::make_unique<std::uint64_t[]>(k_total_words);
    c->m_fresh = true;
  }
  return c;
}

SharedCounters::~SharedCounters() {
  unmap_shared_file(m_mapped, k_format);
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
