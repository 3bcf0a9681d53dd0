#include "nvcc/nvcc_counters.hpp"

#include <atomic>

#include "store/file/shared_file.hpp"

namespace kcache::nvcc {

namespace {

constexpr std::size_t k_first_word = 8;    // after the header and its padding (64 bytes)
constexpr std::size_t k_event_words = 8;
constexpr std::size_t k_reason_words = 16;
static_assert(k_uncacheable_reasons <= k_reason_words);
constexpr store::SharedFileFormat k_format{"nvcc", {'K', 'C', 'N', 'V', 'C', '0', '0', '1'}, 1,
                                           k_event_words + k_reason_words, NvccCounters::k_file_size};

std::size_t event_index(NvccOutcome outcome) { return static_cast<std::size_t>(outcome); }

}  // namespace

std::unique_ptr<NvccCounters> NvccCounters::open(const std::filesystem::path& cache_dir, unsigned mode) {
  std::unique_ptr<NvccCounters> c(new NvccCounters());
  c->m_mapped = store::map_stats_file(cache_dir, k_format, static_cast<mode_t>(mode));
  if (c->m_mapped == nullptr) {
    c->m_local = std::make_unique<std::uint64_t[]>(k_file_size / 8);
  }
  return c;
}

NvccCounters::~NvccCounters() { store::unmap_shared_file(m_mapped, k_format); }

std::uint64_t* NvccCounters::word(std::size_t index) const noexcept {
  return (m_mapped != nullptr ? static_cast<std::uint64_t*>(m_mapped) : m_local.get()) + k_first_word + index;
}

void NvccCounters::add(NvccOutcome outcome) noexcept {
  std::atomic_ref<std::uint64_t>(*word(event_index(outcome))).fetch_add(1, std::memory_order_relaxed);
}

void NvccCounters::add(Uncacheable reason) noexcept {
  const auto r = static_cast<std::size_t>(reason) % k_reason_words;
  std::atomic_ref<std::uint64_t>(*word(k_event_words + r)).fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t NvccCounters::get(NvccOutcome outcome) const noexcept {
  return std::atomic_ref<std::uint64_t>(*word(event_index(outcome))).load(std::memory_order_relaxed);
}

std::uint64_t NvccCounters::get(Uncacheable reason) const noexcept {
  const auto r = static_cast<std::size_t>(reason) % k_reason_words;
  return std::atomic_ref<std::uint64_t>(*word(k_event_words + r)).load(std::memory_order_relaxed);
}

std::optional<NvccStats> read_nvcc_stats(const std::filesystem::path& cache_dir) {
  std::error_code ec;
  if (cache_dir.empty() || !std::filesystem::exists(cache_dir / "v1" / "stats" / "nvcc", ec)) {
    return std::nullopt;
  }
  const auto c = NvccCounters::open(cache_dir);
  NvccStats s;
  static constexpr std::pair<NvccOutcome, const char*> k_names[] = {{NvccOutcome::hit, "hits"},
                                                                    {NvccOutcome::compiled, "compiles"},
                                                                    {NvccOutcome::failed, "failed"},
                                                                    {NvccOutcome::uncached, "uncached"},
                                                                    {NvccOutcome::fallback, "fallbacks"}};
  for (const auto& [outcome, name] : k_names) {
    s.outcomes.emplace_back(name, c->get(outcome));
  }
  for (unsigned r = 1; r < k_uncacheable_reasons; ++r) {
    const auto reason = static_cast<Uncacheable>(r);
    if (const auto n = c->get(reason); n != 0) {
      s.uncached_reasons.emplace_back(std::string(to_string(reason)), n);
    }
  }
  return s;
}

Uncacheable reason_named(std::string_view name) noexcept {
  for (unsigned r = 1; r < k_uncacheable_reasons; ++r) {
    if (to_string(static_cast<Uncacheable>(r)) == name) {
      return static_cast<Uncacheable>(r);
    }
  }
  return Uncacheable::other;
}

}  // namespace kcache::nvcc
