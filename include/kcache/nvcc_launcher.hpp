// kcache/nvcc_launcher.hpp: nvcc compiles through the cache (docs/nvcc.md).
//
// An NvccLauncher runs one nvcc command line the way `kcache nvcc ARGS...`
// and the compiler launcher (`CMAKE_CUDA_COMPILER_LAUNCHER=kcache`) do:
//
//   classify(args) -> not cacheable (a link, several inputs, -E, -M, an
//     unknown option, files beside the output kcache does not know of ...):
//     the caller runs nvcc unchanged (exec), and record_uncached() counts it;
//   run(request) -> the command's key (nvcc's and the host compiler's
//     identity, the environment they read, the canonical options, the
//     source, and, through a dependency manifest, every header either side
//     of the compile read and every path it looked for and did not find) ->
//     a hit writes every output nvcc would write (the output, the -MD/-MF
//     dependency file, the messages nvcc printed) from the verified entry;
//     a miss compiles once per key across threads, processes and hosts
//     (Cache::get_or_compile with the configured lease) and stores the
//     result in every tier.
//
// A failing compile returns nvcc's own messages and exit status, and nothing
// is stored. Anything wrong with the cache (a store that cannot be written,
// a toolchain kcache cannot identify) costs one warning: nvcc runs as it
// would without kcache (outcome `fallback`).
//
// Thread-safety: an NvccLauncher is used by one thread at a time; several
// launchers over one store and Cache may run at once.
#pragma once

#include <cstdint>
#include <functional>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kcache/cache.hpp"
#include "kcache/error.hpp"
#include "kcache/key.hpp"
#include "kcache/store.hpp"

namespace kcache {

// What happened to one nvcc command.
enum class NvccOutcome {
  hit,       // every output written from the cache: nvcc did not run
  compiled,  // a miss: nvcc compiled (and the result was stored where it could be)
  failed,    // nvcc ran and failed: its messages and exit status, nothing stored
  uncached,  // not cacheable: nvcc ran unchanged (see `reason`)
  fallback,  // kcache could not key or store it: nvcc ran without the cache (see `reason`)
};
std::string_view to_string(NvccOutcome outcome) noexcept;

struct NvccCheck {
  bool cacheable = false;
  std::string reason;  // why not: "link", "several_inputs", "preprocess" ... (a counter name)
  std::string detail;  // the option or input that decided it
};

struct NvccRequest {
  std::filesystem::path nvcc;     // the nvcc to run (absolute, or found on PATH by the caller)
  std::vector<std::string> args;  // its arguments, as a build system gives them
};

struct NvccResult {
  NvccOutcome outcome = NvccOutcome::fallback;
  int exit_code = 0;          // what the process should exit with: nvcc's own
  std::string out;            // what nvcc wrote to its standard output (a hit: when the entry was made)
  std::string err;            // ... and to its standard error
  std::string reason;         // uncached / fallback: why
  Key object_key;             // the object's key, once known (zero otherwise)
  Key manifest_key;           // the root dependency manifest's key
  std::uint64_t compile_us = 0;  // nvcc's run on a miss; the time saved on a hit
};

struct NvccLauncherOptions {
  // The store (tiers as configured) and the single-flight cache over it;
  // null: nvcc runs without the cache.
  Store* store = nullptr;
  Cache* cache = nullptr;
  // The cache directory (v1/nvcc/ holds the local memos and the toolchain
  // memo; v1/stats/nvcc the counters). Empty: nothing remembered or counted
  // across processes.
  std::filesystem::path cache_dir;
  // One-line warnings (a store that cannot be written). Default: stderr.
  std::function<void(const std::string&)> warn;
};

class NvccLauncher {
 public:
  explicit NvccLauncher(NvccLauncherOptions options);
  ~NvccLauncher();
  NvccLauncher(const NvccLauncher&) = delete;
  NvccLauncher& operator=(const NvccLauncher&) = delete;

  // Whether `args` (with NVCC_PREPEND_FLAGS, NVCC_APPEND_FLAGS and options
  // files as nvcc reads them) is a compile kcache caches. Never fails.
  static NvccCheck classify(const std::vector<std::string>& args);

  // Counts a command that classify() found not cacheable (before the caller
  // runs nvcc for it).
  void record_uncached(const std::string& reason);

  // Runs `request` through the cache (a command that is not cacheable is
  // run by nvcc as a child, outcome `uncached`). Writes the outputs on a hit;
  // on a miss nvcc writes them. The caller prints `out` and `err` and exits
  // with `exit_code`. Fails only when nvcc cannot be started at all.
  Result<NvccResult> run(const NvccRequest& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache
