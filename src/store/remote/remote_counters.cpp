#include "store/remote/remote_counters.hpp"

#include <atomic>
#include <bit>

namespace kcache::remote {

namespace {
constexpr unsigned k_buckets = 32;
static_assert(static_cast<unsigned>(RemoteCounter::count_) <= RemoteCounters::k_words);
}  // namespace

std::unique_ptr<RemoteCounters> RemoteCounters::in_process() {
  std::unique_ptr<RemoteCounters> c(new RemoteCounters());
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

RemoteCounters::~RemoteCounters() = default;

void RemoteCounters::add(RemoteCounter counter, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(static_cast<unsigned>(counter))).fetch_add(value, std::memory_order_relaxed);
}

void RemoteCounters::add_all(const RemoteCounters& other) noexcept {
  for (unsigned i = 0; i < k_words; ++i) {
    const auto c = static_cast<RemoteCounter>(i);
    add(c, other.get(c));
  }
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
