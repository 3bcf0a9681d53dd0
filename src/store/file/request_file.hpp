// store/file/request_file.hpp: where the request counters of
// kcache/request_stats.hpp live — a cache directory's v1/stats/requests, and
// the per-run report of `kcache run` (docs/run.md, "The summary").
//
// The run report is a file of the same format (request_stats.hpp) held in
// memory (memfd_create) by the process `kcache run` execs, which inherits it
// at a descriptor >= 200. KCACHE_RUN_REPORT names it to every process of the
// run:
//
//   KCACHE_RUN_REPORT := <pid> ":" <fd> ":" <id>     id: 16 lowercase hex digits
//
// A process opens /proc/<pid>/fd/<fd> (the top process's descriptor, so
// processes that did not inherit it reach it too while the top process
// lives) and uses it only when its header is right and holds `id`. The top
// process is the one whose pid is <pid>.
//
// Thread-safety: every function is thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "kcache/error.hpp"
#include "kcache/request_stats.hpp"
#include "util/fd.hpp"

namespace kcache::store {

inline constexpr const char* k_run_report_env = "KCACHE_RUN_REPORT";

// Opens or creates `requests` in the stats directory `stats_dir_fd` with
// `mode`. Never fails: process-local counters when it cannot be used (a
// negative `stats_dir_fd` included).
std::unique_ptr<RequestStats> open_request_stats(int stats_dir_fd, mode_t mode);

// A new, empty run report for `kcache run`: its descriptor (inherited by a
// program it execs: not close-on-exec) and the value of KCACHE_RUN_REPORT
// that names it to the processes of the run, whose top process has this
// process's pid. Failure: io (no memfd).
struct RunReportFile {
  util::Fd fd;
  std::string env_value;
};
Result<RunReportFile> create_run_report();

// The run report KCACHE_RUN_REPORT names to this process, opened on first
// use; nullptr when there is none or it cannot be used.
RequestStats* run_report() noexcept;

// True when this process is the top process of the run that made the report
// KCACHE_RUN_REPORT names (its pid is the one named, and the report opens).
bool is_run_top() noexcept;

}  // namespace kcache::store
