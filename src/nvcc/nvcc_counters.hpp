// nvcc/nvcc_counters.hpp: what `kcache nvcc` did, counted across every
// process that uses one cache directory (docs/nvcc.md, "Counting";
// `kcache stats`).
//
// The file v1/stats/nvcc (format version 1, docs/on-disk-format.md) is mapped
// MAP_SHARED and updated with 64-bit atomics, like v1/stats/interposed:
//
//   nvcc    := header padding[48] event[8] reason[16] zero*     4096 bytes in all
//   header  := "KCNVC001" u32 version(=1) u32 slots(=24)
//   event   := u64   hits, compiles, failed, uncached, fallbacks, then zero
//   reason  := u64   uncached commands per Uncacheable reason (nvcc_command.hpp), in its order
//
// Values are native-endian. A file with the wrong size or header is rebuilt
// (zeroed). When it cannot be created or mapped, counts stay in this process.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kcache/nvcc_launcher.hpp"
#include "nvcc/nvcc_command.hpp"

namespace kcache::nvcc {

class NvccCounters {
 public:
  static constexpr std::size_t k_file_size = 4096;

  // Opens or creates <cache_dir>/v1/stats/nvcc (the stats directory must
  // exist: a cache that was never used counts nothing). Never fails.
  static std::unique_ptr<NvccCounters> open(const std::filesystem::path& cache_dir, unsigned mode = 0600);
  ~NvccCounters();
  NvccCounters(const NvccCounters&) = delete;
  NvccCounters& operator=(const NvccCounters&) = delete;

  void add(NvccOutcome outcome) noexcept;
  void add(Uncacheable reason) noexcept;
  std::uint64_t get(NvccOutcome outcome) const noexcept;
  std::uint64_t get(Uncacheable reason) const noexcept;
  bool shared() const noexcept { return m_mapped != nullptr; }

 private:
  NvccCounters() = default;
  std::uint64_t* word(std::size_t index) const noexcept;
  void* m_mapped = nullptr;
  std::unique_ptr<std::uint64_t[]> m_local;
};

// What `kcache stats` shows of the file, when any process counted into it:
// the outcomes by name ("hits", "compiles", "failed", "uncached",
// "fallbacks") and, of the uncached commands, each reason counted (by its
// to_string name). Empty when no nvcc command was ever run with this cache.
struct NvccStats {
  std::vector<std::pair<std::string, std::uint64_t>> outcomes;
  std::vector<std::pair<std::string, std::uint64_t>> uncached_reasons;
};
std::optional<NvccStats> read_nvcc_stats(const std::filesystem::path& cache_dir);

// The reason whose counter name is `name` (to_string(Uncacheable)); `other` when none.
Uncacheable reason_named(std::string_view name) noexcept;

}  // namespace kcache::nvcc
