// kcache/plan_report.hpp: what a plan build did, entry by entry.
//
// One EntryResult per plan entry, in plan order, and a summary. The JSON form
// (format version 1, docs/plans.md) is what `kcache plan build --json` prints:
//
//   report  := { "format": 1, "plan": str, "host": str, "ok": bool,
//                "entries": [ entry* ], "summary": summary }
//   entry   := { "name": str, "path": str, "sidecar": str, "outcome": OUTCOME,
//                "key": HEX64 | "", "sha256": HEX64 | "", "size": u64,
//                "build_seconds": number | null, "saved_seconds": number,
//                "reason": str, "error": str }
//   OUTCOME := "BUILT" | "REUSED" | "FETCHED" | "FAILED" | "NOT_STARTED"
//   summary := { "entries": u64, "built": u64, "reused": u64, "fetched": u64,
//                "failed": u64, "not_started": u64, "hit_ratio": number,
//                "seconds": number, "saved_seconds": number }
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kcache {

enum class Outcome { built, reused, fetched, failed, not_started };

// "BUILT", "REUSED", "FETCHED", "FAILED", "NOT_STARTED".
std::string_view to_string(Outcome outcome) noexcept;

struct EntryResult {
  std::string name;
  std::string path;     // the published file (absolute)
  std::string sidecar;  // its .sha256 sidecar
  Outcome outcome = Outcome::not_started;
  std::string key;      // 64 hex, empty when not computed
  std::string sha256;   // of the published file
  std::uint64_t size = 0;
  std::optional<double> build_seconds;  // BUILT only
  double saved_seconds = 0;             // REUSED/FETCHED: the build time recorded when it was built
  std::string reason;                   // why it was (re)built: "absent", "sidecar mismatch", "stale key", ...
  std::string error;                    // FAILED: what went wrong, with the fix
  std::string log;                      // FAILED: the tool's log tail
};

struct PlanSummary {
  std::uint64_t entries = 0;
  std::uint64_t built = 0;
  std::uint64_t reused = 0;
  std::uint64_t fetched = 0;
  std::uint64_t failed = 0;
  std::uint64_t not_started = 0;
  double hit_ratio = 0;      // (reused + fetched) / (reused + fetched + built + failed); 0 when none ran
  double seconds = 0;        // wall time of the whole build
  double saved_seconds = 0;  // sum of saved_seconds
};

struct PlanReport {
  std::string plan;  // the plan file
  std::string host;  // HostFingerprint::to_string()
  std::vector<EntryResult> entries;
  PlanSummary summary;

  // True when no entry failed or was left unstarted.
  bool ok() const noexcept { return summary.failed == 0 && summary.not_started == 0; }

  // Fills `summary` from `entries` (keeps `summary.seconds`).
  void summarise();

  // The JSON document above, indented.
  std::string to_json() const;

  // A table for people: one row per entry, then the summary line.
  std::string to_table() const;
};

}  // namespace kcache
