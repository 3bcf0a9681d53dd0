#include "cache/interposed_counters.hpp"

#include <atomic>

#include "store/file/shared_file.hpp"

namespace kcache {

namespace {

constexpr unsigned k_slots = 8;
constexpr std::size_t k_first_word = 8;  // after the header and its padding (64 bytes)
constexpr store::SharedFileFormat k_format{"interposed", {'K', 'C', 'I', 'N', 'T', '0', '0', '1'}, 1,
                                           k_interposed_libraries, InterposedCounters::k_file_size};

}  // namespace

std::string_view to_string(InterposedEvent event) noexcept {
  switch (event) {
    case InterposedEvent::hit:
      return "hits";
    case InterposedEvent::compile:
      return "compiles";
    case InterposedEvent::uncached:
      return "uncached";
    case InterposedEvent::fallback:
      return "fallbacks";
    case InterposedEvent::count_:
      break;
  }
  return "?";
}

std::unique_ptr<InterposedCounters> InterposedCounters::open(const std::filesystem::path& cache_dir, unsigned mode) {
  std::unique_ptr<InterposedCounters> c(new InterposedCounters());
  c->m_mapped = store::map_stats_file(cache_dir, k_format, static_cast<mode_t>(mode));
  if (c->m_mapped == nullptr) {
    c->m_local = std::make_unique<std::uint64_t[]>(k_file_size / 8);
  }
  return c;
}

InterposedCounters::~InterposedCounters() { store::unmap_shared_file(m_mapped, k_format); }

std::uint64_t* InterposedCounters::word(unsigned library, InterposedEvent event) const noexcept {
  const std::size_t index =
      k_first_word + std::size_t{library % k_interposed_libraries} * k_slots + static_cast<unsigned>(event);
  return (m_mapped != nullptr ? static_cast<std::uint64_t*>(m_mapped) : m_local.get()) + index;
}

void InterposedCounters::add(unsigned library, InterposedEvent event, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(*word(library, event)).fetch_add(value, std::memory_order_relaxed);
}

std::uint64_t InterposedCounters::get(unsigned library, InterposedEvent event) const noexcept {
  return std::atomic_ref<std::uint64_t>(*word(library, event)).load(std::memory_order_relaxed);
}

}  // namespace kcache
