// cache/interposed_counters.hpp: what the stand-in JIT libraries behind
// `kcache run` did, counted per library across every process that uses one
// cache directory (docs/run.md, "Counting"; `kcache stats`).
//
// The file v1/stats/interposed (format version 1, docs/on-disk-format.md) is
// mapped MAP_SHARED and updated with 64-bit atomics, like v1/stats/counters:
//
//   interposed := header padding[48] row[3] zero*       4096 bytes in all
//   header     := "KCINT001" u32 version(=1) u32 rows(=3)
//   row        := u64 counter[8]        nvrtc, nvjitlink, nvvm, in that order;
//                                       counters in the order of InterposedEvent
//
// Values are native-endian. A file with the wrong size or header is rebuilt
// (zeroed). When it cannot be created or mapped, counts stay in this process.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

namespace kcache {

// What one interposed call did.
enum class InterposedEvent : unsigned {
  hit,        // served from the cache: the real library did not compile
  compile,    // a miss: the real library compiled (and the result was stored when it could be)
  uncached,   // compiled by the real library without the cache (not cacheable, a failed compile)
  fallback,   // kcache failed (a store, a key): forwarded to the real library, warned once
  count_
};
inline constexpr unsigned k_interposed_libraries = 3;  // nvrtc, nvjitlink, nvvm

// Returns "hits", "compiles", "uncached", "fallbacks".
std::string_view to_string(InterposedEvent event) noexcept;

class InterposedCounters {
 public:
  static constexpr std::size_t k_file_size = 4096;

  // Opens or creates <cache_dir>/v1/stats/interposed. Never fails: counts stay
  // in this process when the file cannot be used (a read-only cache).
  static std::unique_ptr<InterposedCounters> open(const std::filesystem::path& cache_dir, unsigned mode = 0600);
  ~InterposedCounters();
  InterposedCounters(const InterposedCounters&) = delete;
  InterposedCounters& operator=(const InterposedCounters&) = delete;

  // `library`: 0 nvrtc, 1 nvjitlink, 2 nvvm.
  void add(unsigned library, InterposedEvent event, std::uint64_t value = 1) noexcept;
  std::uint64_t get(unsigned library, InterposedEvent event) const noexcept;
  // True when the counts are shared through the file.
  bool shared() const noexcept { return m_mapped != nullptr; }

 private:
  InterposedCounters() = default;
  std::uint64_t* word(unsigned library, InterposedEvent event) const noexcept;
  void* m_mapped = nullptr;
  std::unique_ptr<std::uint64_t[]> m_local;
};

}  // namespace kcache
