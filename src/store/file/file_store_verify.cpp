// store/file/file_store_verify.cpp: FileStore::verify: every entry, payload and
// passport checked against the accounting and each other; with Repair::yes,
// what is wrong is removed or recounted (docs/on-disk-format.md, "verify").
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "kcache/file_store.hpp"
#include "store/file/entry_cost.hpp"
#include "store/file/file_store_impl.hpp"
#include "store/file/shared_file.hpp"
#include "util/posix_io.hpp"
#include "util/process_identity.hpp"
#include "util/sha256.hpp"

namespace kcache {

using store::Counter;
namespace io = util::io;

Result<VerifyReport> FileStore::verify(Repair repair) {
  Impl& m = *m_impl;
  VerifyReport report;
  std::uint64_t disk_pinned_bytes = 0;
  std::uint64_t disk_pinned_entries = 0;
  if (!m.entries_fd) {
    return make_error(ErrorCode::not_found, "the cache at " + m.options.root.string() + " has no v1/entries");
  }
  for (unsigned shard = 0; shard < store::k_shard_count; ++shard) {
    int err = 0;
    util::Fd fd = m.open_shard(shard, CreateShard::no, err);
    if (!fd && err == ENOENT && (m.counters->shard_entries(shard) != 0 || m.counters->shard_bytes(shard) != 0)) {
      // Removed behind kcache's back while the accounting still counts it.
      // Repair recreates the directory, so that the recount below happens
      // under its lock (a writer may be creating it right now).
      if (repair == Repair::no) {
        report.counted_entries += m.counters->shard_entries(shard);
        report.counted_bytes += m.counters->shard_bytes(shard);
        continue;
      }
      fd = m.open_shard(shard, CreateShard::yes, err);
    }
    if (!fd) {
      if (err != ENOENT) {
        ++report.orphans;
        report.problems.push_back("v1/entries/" + store::shard_name(shard) + " is not a directory");
        if (repair == Repair::yes && io::unlinkat(m.entries_fd.get(), store::shard_name(shard).c_str(), 0) == 0) {
          ++report.orphans_removed;
        }
      }
      continue;
    }
    ShardLock lock(fd.get(), LOCK_EX);
    if (!lock.held()) {
      return make_errno_error(lock.error(), "cannot lock shard " + store::shard_name(shard));
    }
    std::vector<std::string> passports;
    std::vector<std::string> payloads;
    std::vector<std::string> junk;
    for_each_dir_entry(fd.get(), [&](std::string_view name, unsigned char) {
      std::string_view key_hex;
      switch (store::classify_entry_name(name, shard, key_hex)) {
        case store::EntryName::passport: passports.emplace_back(key_hex); break;
        case store::EntryName::payload: payloads.emplace_back(key_hex); break;
        case store::EntryName::pin: break;  // a pin marker: checked with its entry (scan_shard_locked)
        case store::EntryName::junk: junk.emplace_back(name); break;
      }
    });
    std::sort(passports.begin(), passports.end());
    const std::string where = "v1/entries/" + store::shard_name(shard) + "/";
    for (const auto& key_hex : passports) {
      ++report.entries_checked;
      std::string problem;
      const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
      util::Fd pfd(io::openat(fd.get(), pass_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
      struct stat ps {};
      std::string text;
      if (!pfd || io::fstat(pfd.get(), &ps) != 0 || !S_ISREG(ps.st_mode)) {
        problem = "passport is not a regular file";
      } else if (static_cast<std::uint64_t>(ps.st_size) > k_passport_max_bytes) {
        problem = "passport is too large";
      } else if (io::read_bounded(pfd.get(), k_passport_max_bytes, text, static_cast<std::size_t>(ps.st_size)) != 0) {
        problem = "passport cannot be read";
      }
      std::optional<Passport> passport;
      if (problem.empty()) {
        auto parsed = Passport::from_json(text);
        if (!parsed) {
          problem = "passport does not parse: " + parsed.error().message;
        } else if (auto identity = check_entry_identity(*Key::parse(key_hex), *parsed); !identity) {
          problem = "the entry is not what its key says: " + identity.error().message;
        } else {
          passport = std::move(*parsed);
        }
      }
      if (problem.empty()) {
        util::Fd dfd(io::openat(fd.get(), key_hex.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
        struct stat ds {};
        std::string payload_sha256;  // hashed in bounded chunks: memory does not grow with the payload
        if (!dfd || io::fstat(dfd.get(), &ds) != 0 || !S_ISREG(ds.st_mode)) {
          problem = "payload is missing or not a regular file";
        } else if (static_cast<std::uint64_t>(ds.st_size) != passport->payload_size) {
          problem = "payload is " + std::to_string(ds.st_size) + " bytes, passport says " +
                    std::to_string(passport->payload_size);
        } else if (sha256_hex_of_file(dfd.get(), passport->payload_size, payload_sha256) != 0) {
          problem = "payload cannot be read in full";
        } else if (payload_sha256 != passport->payload_sha256) {
          problem = "payload SHA-256 does not match the passport";
        }
      }
      if (problem.empty()) {
        ++report.entries_ok;
        continue;
      }
      ++report.entries_bad;
      report.problems.push_back(where + key_hex + ": " + problem);
      if (repair == Repair::yes && m.remove_locked(shard, fd.get(), key_hex, nullptr)) {
        ++report.entries_removed;
        m.counters->add(Counter::corrupt);
      }
    }
    for (const auto& key_hex : payloads) {
      if (!std::binary_search(passports.begin(), passports.end(), key_hex)) {
        ++report.orphans;
        report.problems.push_back(where + key_hex + ": payload without passport (orphan)");
        if (repair == Repair::yes && io::unlinkat(fd.get(), key_hex.c_str(), 0) == 0) {
          ++report.orphans_removed;
        }
      }
    }
    for (const auto& name : junk) {
      ++report.orphans;
      report.problems.push_back(where + name + ": not a kcache name (junk)");
      struct stat js {};
      if (repair == Repair::yes && io::fstatat(fd.get(), name.c_str(), &js, AT_SYMLINK_NOFOLLOW) == 0 &&
          !S_ISDIR(js.st_mode) && io::unlinkat(fd.get(), name.c_str(), 0) == 0) {
        ++report.orphans_removed;
      }
    }
    // The accounting (under the shard lock it changes only by our hand, and
    // the removals above took their entries off it) against what is on disk
    // now; with repair the accounting is set to what is on disk.
    report.counted_entries += m.counters->shard_entries(shard);
    report.counted_bytes += m.counters->shard_bytes(shard);
    const auto complete = m.scan_shard_locked(shard, fd.get(), repair == Repair::yes ? Orphans::remove : Orphans::keep,
                                              repair == Repair::yes ? Recount::yes : Recount::no);
    report.disk_entries += complete.size();
    for (const auto& e : complete) {
      report.disk_bytes += e.bytes;
      disk_pinned_bytes += e.pinned ? e.bytes : 0;
      disk_pinned_entries += e.pinned ? 1 : 0;
    }
  }
  if (const std::uint64_t counted = m.counters->get(Counter::pinned_bytes);
      counted != disk_pinned_bytes || m.counters->get(Counter::pinned_entries) != disk_pinned_entries) {
    report.problems.push_back("v1/stats/counters: the shared accounting says " +
                              std::to_string(m.counters->get(Counter::pinned_entries)) + " pinned entries (" +
                              std::to_string(counted) + " bytes), the disk holds " +
                              std::to_string(disk_pinned_entries) + " (" + std::to_string(disk_pinned_bytes) +
                              " bytes)" + (repair == Repair::yes ? "; set to what is on disk" : ""));
    if (repair == Repair::yes) {
      m.counters->set(Counter::pinned_bytes, disk_pinned_bytes);
      m.counters->set(Counter::pinned_entries, disk_pinned_entries);
    }
  }
  if (report.counted_entries != report.disk_entries || report.counted_bytes != report.disk_bytes) {
    report.counters_resynced = repair == Repair::yes;
    report.problems.push_back("v1/stats/counters: the shared accounting says " + std::to_string(report.counted_entries) +
                              " entries (" + std::to_string(report.counted_bytes) + " bytes), the disk holds " +
                              std::to_string(report.disk_entries) + " (" + std::to_string(report.disk_bytes) +
                              " bytes)" + (repair == Repair::yes ? "; set to what is on disk" : ""));
  }
  if (repair == Repair::yes) {
    // Room reserved by puts in flight stays; that of writers that are gone goes.
    report.reserved_bytes_released = m.counters->reclaim_dead_rooms();
    if (report.reserved_bytes_released != 0) {
      report.problems.push_back("v1/stats/counters: released " + std::to_string(report.reserved_bytes_released) +
                                " bytes reserved under the cap by writers that are gone");
    }
  }
  std::vector<std::string> temps;
  const TempScan scan = m.scan_temps(repair == Repair::yes ? TempSweep::remove : TempSweep::count, &temps);
  report.stale_temps = scan.stale_files;
  report.stale_temps_removed = scan.removed;
  report.orphans += scan.stale_files;
  report.orphans_removed += scan.removed;
  report.problems.insert(report.problems.end(), temps.begin(), temps.end());
  // A process killed while making stats/counters or stats/checks leaves its
  // staged file (never read): swept with the temps, at least 10 s old.
  if (repair == Repair::yes && m.stats_fd) {
    for (const auto& name : store::sweep_staged_shared_files(
             m.stats_fd.get(), std::max<std::int64_t>(10, m.options.stale_temp_age.count()))) {
      ++report.orphans;
      ++report.orphans_removed;
      report.problems.push_back("v1/stats/" + name + ": staged file of a writer that was killed; removed");
    }
  }
  return report;
}

}  // namespace kcache
