// kcache/request_stats.hpp: how requests for compiled artifacts ended, counted
// by outcome, by the tier that served them and by route, across every
// process that uses one cache directory (`kcache stats`, docs/cli.md).
//
// A request is one ask for a compiled artifact: a kcache::compile() or
// Cache::get_or_compile() call, an interposed nvrtcCompileProgram under
// `kcache run`, a Triton kernel group, a cuda.core ProgramCache lookup, an
// Inductor graph. It ends in one of four outcomes:
//
//   served    the artifact came from the cache; the tier says from where
//             (memory, disk, bundle, remote). `compile_us` is the compile
//             time it saved (the compile duration in its passport). A
//             failed compile replayed from its negative entry (docs/keys.md,
//             "Failed compiles") is served too, and counted apart as well
//             (`served_failed`, recorded as RequestOutcome::served_failure).
//   compiled  compiled here and stored. `compile_us`: the time compiling.
//   uncached  compiled here without the cache: not cacheable (a side-effect
//             option, an include kcache cannot bound), or the store failed.
//   failed    the request ended in an error (the compile failed, no toolkit)
//             that the cache did not replay: the compile ran here.
//
// The lookups inside one request (memory, then disk, then remote; again after
// a single-flight wait) are the tiers' own counters (StoreStats), not these.
//
// A route names who asked: "cli" (the kcache command), "library" (a C++
// program), "python" (kcache.compile), "run" (the stand-in libraries behind
// `kcache run`), "cuda-core", "triton", "torch", "jax", "nvcc" ... Routes are
// 1 to 16 bytes of [a-z0-9._-]. A Cache or compile() given no route counts
// under the process's default route (set_default_request_route).
//
// The file v1/stats/requests (format version 1, docs/on-disk-format.md) is
// mapped MAP_SHARED and updated with lock-free 64-bit atomics:
//
//   requests := header row[31]                          4096 bytes in all
//   header   := "KCREQ001" u32 version(=1) u32 rows(=31) u64 id u64 reserved[5]
//   row      := u64 tag u8 route[16] u64 counter[13]    128 bytes
//   tag      := 0 (free), else FNV-1a-64(route) | 1 << 63
//   counter  := served_memory served_disk served_bundle served_remote compiled
//               uncached failed compile_us_saved compile_us served_failed
//               reserved[3]
//
// `served_failed` counts the served requests that replayed a failed compile
// (a subset of the four served counters); it was a reserved word before, so
// a file of an older kcache reads 0 there.
//
// A route takes the first free row with one compare-and-swap of its tag,
// then writes its name; the last row is "other", for routes that find no row
// (or an invalid route name). `id` is 0 in a cache directory; a `kcache run`
// report (below) holds its own id there. Values are native-endian. A file
// with the wrong size or header is rebuilt (zeroed); where it cannot be made
// or mapped (a read-only cache), counts stay in the process.
//
// `kcache run` makes one more file of this format per run, in memory
// (memfd), and names it to the processes it starts in KCACHE_RUN_REPORT:
// record_request() counts each request there too, and the program's top
// process prints the run's summary from it at exit (docs/run.md).
//
// Thread-safety: every function and method is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/store.hpp"

namespace kcache {

// How one request ended (see the top of this file).
// `served_failure` is a served request whose entry is a failed compile
// (counted as served, by tier, and in `served_failed`).
enum class RequestOutcome : unsigned { served, compiled, uncached, failed, served_failure };
inline constexpr unsigned k_request_outcome_count = 5;
// Returns "served", "compiled", "uncached", "failed", "served_failure".
std::string_view to_string(RequestOutcome outcome) noexcept;
// The outcome named by `name` (as to_string spells it), or std::nullopt.
std::optional<RequestOutcome> parse_request_outcome(std::string_view name) noexcept;

// The counts of one route (or of all).
struct RequestCounts {
  std::array<std::uint64_t, k_tier_count> served{};  // indexed by Tier
  std::uint64_t compiled = 0;
  std::uint64_t uncached = 0;
  std::uint64_t failed = 0;
  std::uint64_t compile_us_saved = 0;  // over served requests
  std::uint64_t compile_us = 0;        // time compiling: compiled, uncached and failed requests
  std::uint64_t served_failed = 0;     // served requests that replayed a failed compile (within `served`)

  std::uint64_t served_total() const noexcept;
  std::uint64_t total() const noexcept;  // every request
  RequestCounts& operator+=(const RequestCounts& other) noexcept;
};

struct RouteRequests {
  std::string route;
  RequestCounts counts;
};

class RequestStats {
 public:
  static constexpr std::size_t k_file_size = 4096;
  static constexpr unsigned k_rows = 31;  // the last one is "other"
  static constexpr std::size_t k_max_route_bytes = 16;

  // True when `route` is 1 to 16 bytes of [a-z0-9._-].
  static bool valid_route(std::string_view route) noexcept;

  // The counters of `cache_dir` for reading (`kcache stats`): nullptr when
  // the directory has no v1/stats/requests yet or it cannot be mapped. Never
  // creates anything.
  static std::unique_ptr<RequestStats> open_existing(const std::filesystem::path& cache_dir);

  ~RequestStats();
  RequestStats(const RequestStats&) = delete;
  RequestStats& operator=(const RequestStats&) = delete;

  // Counts one request of `route` that ended with `outcome`; `tier` is where
  // a served request came from (ignored otherwise; a served request without
  // one counts as disk), `compile_us` its compile duration (saved when
  // served, spent otherwise). An invalid `route` counts as "other".
  void record(std::string_view route, RequestOutcome outcome, std::optional<Tier> tier,
              std::uint64_t compile_us) noexcept;

  // Every route that has a row, in row order (the "other" row only when used).
  std::vector<RouteRequests> routes() const;

  // One row as read_rows() gives it.
  struct Row {
    std::array<char, k_max_route_bytes + 1> route{};  // NUL-terminated
    RequestCounts counts;
  };
  // routes(), into `out` (room for `max` rows): returns how many it wrote.
  // Allocates nothing (the `kcache run` summary reads it in _exit).
  std::size_t read_rows(Row* out, std::size_t max) const noexcept;
  // The sum over every route.
  RequestCounts total() const;
  // True when the counts are the shared file, false when process-local.
  bool shared() const noexcept { return m_mapped != nullptr; }

 private:
  RequestStats() = default;
  std::uint64_t* row(unsigned index) const noexcept;
  unsigned row_of(std::string_view route) noexcept;

  void* m_mapped = nullptr;                  // the shared file, or null
  std::unique_ptr<std::uint64_t[]> m_local;  // used when m_mapped is null
  friend struct RequestStatsAccess;
};

// Counts one request in the request counters of `store`'s cache directory
// (Store::request_stats; none for a store without one, or a null `store`)
// and in the `kcache run` report of this process, if it runs under one.
// `route` empty: the process's default route. See RequestStats::record.
// This is the one call an integration makes when a request ends. Never fails.
void record_request(Store* store, std::string_view route, RequestOutcome outcome,
                    std::optional<Tier> tier = std::nullopt, std::uint64_t compile_us = 0) noexcept;

// The same, for a cache directory by path (opened once per process and
// directory; created when missing, as a FileStore would with private modes).
void record_request(const std::filesystem::path& cache_dir, std::string_view route, RequestOutcome outcome,
                    std::optional<Tier> tier = std::nullopt, std::uint64_t compile_us = 0) noexcept;

// The route under which a Cache or compile() with no route of its own counts
// requests in this process: "library" unless set. The kcache command sets
// "cli", the Python module "python", the `kcache run` stand-in "run". An
// invalid route is ignored.
void set_default_request_route(std::string_view route) noexcept;
std::string default_request_route();

// The tier a hit just returned by `store.get()` came from: the chain's note
// (Store::last_served_tier), else the store's own tier, else disk. Call it
// right after the get(), on the same thread, having reset the note before it.
Tier served_tier(const Store& store) noexcept;

}  // namespace kcache
