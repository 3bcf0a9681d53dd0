// kcache/orchestrator.hpp: build or reuse every entry of a plan for one host.
//
// For each entry, in plan order (or N at a time with `jobs`):
//   1. its file name comes from the schema (engine_name.hpp) and the host;
//   2. REUSED when that file exists, its `.sha256` sidecar verifies, and the
//      passport beside it (`<file>.pass`) carries the entry's key; a sidecar
//      that does not verify emits engine.sidecar.mismatch and the entry is rebuilt;
//   3. FETCHED when the content cache has the key: the artifact is published;
//   4. BUILT otherwise: the builder writes into a staging directory kcache
//      owns (`<output_dir>/.kcache-staging/`), the output is checked to exist
//      and be non-empty, then published and put in the content cache.
//
// The entry key is SHA-256 over the builder, kind, precision, host SM, CUDA,
// TensorRT and JetPack versions, every input's content (not its path), flags,
// shapes, options, and what the builder adds (its command template, nvcc's
// version). The driver version and the entry name are not in the key.
//
// Publishing is atomic per file and ordered: an old sidecar and passport are
// removed, then the file, the passport and last the sidecar are renamed into
// place (each fsynced first, the directory after). A killed build leaves, per
// entry, either nothing new, or a complete file without a sidecar (rebuilt on
// the next run), or the complete verified set. Staging directories of dead
// processes are swept at the start of a run. One entry is held by one process
// at a time (a lock file per entry name).
//
// Errors: the first failing entry stops the build (entries already published
// stay; later ones are NOT_STARTED) unless KeepGoing::yes.
//
// Events (JSON lines, docs/plans.md): engine.cache.hit, engine.cache.miss,
// engine.sidecar.mismatch, engine.build.error, engine.build.summary.
//
// Thread-safety: one run() at a time per Orchestrator; callbacks are called
// one at a time (under a lock) from the threads that run entries.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "kcache/builder.hpp"
#include "kcache/error.hpp"
#include "kcache/host_fingerprint.hpp"
#include "kcache/key.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/plan.hpp"
#include "kcache/plan_report.hpp"
#include "kcache/store.hpp"

namespace kcache {

enum class KeepGoing { no, yes };
enum class Durability { fsync, none };

// A per-kind step around publishing, e.g. stamping a passport into an ONNX model.
class ArtifactFinisher {
 public:
  virtual ~ArtifactFinisher() = default;
  // Rewrites a freshly built file in staging before it is hashed. Failure fails the entry.
  virtual Result<void> finish(const std::filesystem::path& staged, const PlanEntry& entry, const Key& key) const = 0;
  // Checks a file before it is reused or published from the cache; failure
  // makes the entry rebuild (reuse) or fail (publish). Returns `corrupt` with a reason.
  virtual Result<void> check(const std::filesystem::path& file, const Key& key) const = 0;
};

struct OrchestratorOptions {
  const BuilderRegistry* builders = nullptr;  // required; not owned, must outlive the orchestrator
  Store* cache = nullptr;                     // the content cache, optional; not owned
  unsigned jobs = 1;                          // entries built at once (at least 1)
  KeepGoing keep_going = KeepGoing::no;
  Durability durability = Durability::fsync;
  std::map<std::string, std::shared_ptr<const ArtifactFinisher>> finishers;  // by artifact kind
  std::function<void(std::string_view json_line)> on_event;                  // one JSON object, no newline
  std::function<void(const EntryResult& result, std::size_t done, std::size_t total)> on_progress;
};

class Orchestrator {
 public:
  explicit Orchestrator(OrchestratorOptions options);

  // Runs each entry's builder checks (command present, placeholders known).
  // Returns invalid_argument whose message is the first problem and whose log
  // lists them all as "<plan>:<line>: <problem>".
  Result<void> validate(const Plan& plan) const;

  // Builds or reuses every entry of `plan` for `host`. Returns the report (an
  // entry failure is an outcome in it, see PlanReport::ok()); returns an error
  // only when nothing could start: validation failed (invalid_argument), or
  // the output directory cannot be created (io, permission_denied).
  Result<PlanReport> run(const Plan& plan, const HostFingerprint& host);

  // The name of `entry`'s file for `host` (no directory); invalid_argument
  // when the schema cannot hold it.
  Result<std::string> file_name(const PlanEntry& entry, const HostFingerprint& host) const;

  // The key of `entry` for `host` (hashes every input).
  Result<Key> entry_key(const PlanEntry& entry, const HostFingerprint& host) const;

 private:
  Result<KeyBuilder> make_key_builder(const PlanEntry& entry, const HostFingerprint& host) const;
  OrchestratorOptions m_options;
};

// The passport path of a published plan file: `<file>.pass`.
std::filesystem::path plan_passport_path(const std::filesystem::path& file);

}  // namespace kcache
