#include "store/file/shared_counters.hpp"

#include <sys/mman.h>
#include <csignal>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "store/file/shared_file.hpp"
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
  const std::uint64_t v = std::atomic_ref<std::uint64_t>(*word(k_header_words + static_cast<unsigned>(counter)))
                              .load(std::memory_order_relaxed);
  // A counter that goes up and down (the pinned ones) reads 0 when a drift
  // took it below zero.
  return static_cast<std::int64_t>(v) < 0 ? 0 : v;
}

void SharedCounters::sub(Counter counter, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(k_header_words + static_cast<unsigned>(counter)))
      .fetch_sub(value, std::memory_order_relaxed);
}

void SharedCounters::set(Counter counter, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(k_header_words + static_cast<unsigned>(counter)))
      .store(value, std::memory_order_relaxed);
}

unsigned SharedCounters::evict_hand() const noexcept {
  return static_cast<unsigned>(
      std::atomic_ref<std::uint64_t>(*word(k_header_words + k_counter_slots - 1)).load(std::memory_order_relaxed) %
      k_shards);
}

void SharedCounters::set_evict_hand(unsigned shard) noexcept {
  std::atomic_ref<std::uint64_t>(*word(k_header_words + k_counter_slots - 1))
      .store(shard % k_shards, std::memory_order_relaxed);
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

// ---------------------------------------------------------------- room for puts in flight

namespace {
constexpr std::size_t room_word(unsigned slot) {
  return shard_word(SharedCounters::k_shards) + std::size_t{slot} * 2;
}
static_assert(static_cast<unsigned>(Counter::count_) < SharedCounters::k_counter_slots,
              "the last counter slot is the eviction hand");
static_assert(room_word(SharedCounters::k_room_slots) * 8 <= SharedCounters::k_file_size);

std::atomic<std::uint32_t> g_room_sequence{0};
}  // namespace

int SharedCounters::reserve_room(std::uint64_t bytes) noexcept {
  const std::uint64_t owner = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(::getpid())) << 32) |
                              (g_room_sequence.fetch_add(1, std::memory_order_relaxed) | 1U);
  // Start at a slot that depends on the owner, so that writers rarely contend.
  const unsigned start = static_cast<unsigned>((owner >> 32) * 31 + (owner & 0xffffffffU)) % k_room_slots;
  for (unsigned i = 0; i < k_room_slots; ++i) {
    const unsigned slot = (start + i) % k_room_slots;
    std::uint64_t expected = 0;
    if (std::atomic_ref<std::uint64_t>(*word(room_word(slot))).compare_exchange_strong(expected, owner)) {
      std::atomic_ref<std::uint64_t>(*word(room_word(slot) + 1)).store(bytes);
      return static_cast<int>(slot);
    }
  }
  return -1;
}

void SharedCounters::release_room(int slot) noexcept {
  if (slot < 0 || slot >= static_cast<int>(k_room_slots)) {
    return;
  }
  const auto s = static_cast<unsigned>(slot);
  std::atomic_ref<std::uint64_t>(*word(room_word(s) + 1)).store(0);
  std::atomic_ref<std::uint64_t>(*word(room_word(s))).store(0);
}

std::uint64_t SharedCounters::reserved_bytes() const noexcept {
  std::uint64_t sum = 0;
  for (unsigned slot = 0; slot < k_room_slots; ++slot) {
    if (std::atomic_ref<std::uint64_t>(*word(room_word(slot))).load() != 0) {
      sum += std::atomic_ref<std::uint64_t>(*word(room_word(slot) + 1)).load();
    }
  }
  return sum;
}

std::uint64_t SharedCounters::reclaim_dead_rooms() noexcept {
  std::uint64_t freed = 0;
  for (unsigned slot = 0; slot < k_room_slots; ++slot) {
    std::uint64_t owner = std::atomic_ref<std::uint64_t>(*word(room_word(slot))).load();
    if (owner == 0) {
      continue;
    }
    const auto pid = static_cast<pid_t>(owner >> 32);
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) {
      continue;  // alive (or not ours to judge: EPERM means it exists)
    }
    // The slot is freed by its owner word alone. Its bytes word is left as it
    // is: clearing it could clear the bytes of a writer that took the slot
    // between our look and the clearing (a reader counts the stale bytes of a
    // slot just taken until its new owner writes its own: too many, never too
    // few).
    const std::uint64_t bytes = std::atomic_ref<std::uint64_t>(*word(room_word(slot) + 1)).load();
    if (std::atomic_ref<std::uint64_t>(*word(room_word(slot))).compare_exchange_strong(owner, 0)) {
      freed += bytes;
    }
  }
  return freed;
}

}  // namespace kcache::store
