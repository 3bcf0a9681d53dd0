// store/file/file_store_maintenance.cpp: eviction under the shared cap, prune,
// clear, and sweeping of leftovers (verify: file_store_verify.cpp).
//
// Eviction (docs/on-disk-format.md, "Size cap"): a put that would pass the cap
// takes the evict lock (v1/stats/evict.lock, flock) and evicts in steps of
// bounded work. A step scans the shards from the shared eviction hand on until
// its window holds a sample of at least k_evict_sample entries (recounting
// each shard's accounting exactly and dropping orphan payloads under the
// shard's lock), then removes the window's least recently used entries: what
// the put needs, and at least the window's cut (100 - low watermark percent of
// its bytes), so that the puts after it find room without evicting. The work
// per put is thus flat in the number of entries (a window is the sample, or
// one shard when a shard holds more). Entries are removed passport first, only
// if the passport is still the one scanned (stat-guarded). prune evicts over
// every shard (evict_to).
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

namespace {

// Whether anything of entry `key_hex` (its payload or passport) is still in the shard.
bool entry_file_left(int shard_fd, const std::string& key_hex) {
  struct stat st {};
  const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
  return io::fstatat(shard_fd, key_hex.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
         io::fstatat(shard_fd, pass_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

constexpr unsigned k_window = 32;
// Entries an eviction step samples at least (docs/on-disk-format.md).
constexpr std::size_t k_evict_sample = 512;

// Orders `window` for eviction, first to go first (docs/on-disk-format.md,
// "Size cap and eviction").
void rank_for_eviction(std::vector<ScannedEntry>& window, EvictionPolicy policy, std::int64_t now_ns) {
  if (policy == EvictionPolicy::lru) {
    std::sort(window.begin(), window.end(),
              [](const ScannedEntry& a, const ScannedEntry& b) { return a.last_used_ns < b.last_used_ns; });
    return;
  }
  // GreedyDual-Size-Frequency with aging, over the window: an entry used
  // `uses` times, last `age` ago, is expected to be asked for again at a rate
  // that grows with its uses and falls with its age, and each time it is
  // asked for after its eviction costs `cost` of rebuild time; per byte freed
  // it is worth uses x cost / (bytes x age). The least worth goes first;
  // entries of no recorded cost (worth 0) go first, least recently used among
  // them. (GDSF's inflation value L, raised to each evicted entry's priority,
  // ages entries by the evictions since their last use; the age here does so
  // by the time since.) `gds` leaves the uses out (every entry counts as used
  // once), as kcache did before uses were recorded.
  constexpr double k_min_age_ns = 1e6;  // 1 ms: an entry used "now" is not infinitely valuable
  std::vector<std::pair<double, std::size_t>> order;
  order.reserve(window.size());
  for (std::size_t i = 0; i < window.size(); ++i) {
    const auto& e = window[i];
    const double age = std::max(k_min_age_ns, static_cast<double>(now_ns - e.last_used_ns));
    const double uses = policy == EvictionPolicy::gds ? 1.0 : static_cast<double>(e.uses);
    const double worth =
        uses * static_cast<double>(e.cost_us) / (static_cast<double>(std::max<std::uint64_t>(e.bytes, 1)) * age);
    order.emplace_back(worth, i);
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) {
      return a.first < b.first;
    }
    return window[a.second].last_used_ns < window[b.second].last_used_ns;
  });
  std::vector<ScannedEntry> ranked;
  ranked.reserve(window.size());
  for (const auto& [worth, i] : order) {
    ranked.push_back(std::move(window[i]));
  }
  window = std::move(ranked);
}

}  // namespace

std::vector<ScannedEntry> FileStore::Impl::scan_shard_locked(unsigned shard, int shard_fd, Orphans orphans,
                                                             Recount recount) {
  std::vector<ScannedEntry> out;
  std::vector<std::string> payloads;
  std::vector<std::string> pins;
  for_each_dir_entry(shard_fd, [&](std::string_view name, unsigned char) {
    std::string_view key_hex;
    const auto kind = store::classify_entry_name(name, shard, key_hex);
    if (kind == store::EntryName::payload) {
      payloads.emplace_back(name);
    } else if (kind == store::EntryName::pin) {
      pins.emplace_back(key_hex);
    } else if (kind == store::EntryName::passport) {
      ScannedEntry e;
      e.shard = shard;
      e.key_hex = std::string(key_hex);
      out.push_back(std::move(e));
    }
  });
  std::sort(payloads.begin(), payloads.end());
  std::sort(pins.begin(), pins.end());
  std::int64_t bytes = 0;
  std::vector<ScannedEntry> complete;
  complete.reserve(out.size());
  for (auto& e : out) {
    struct stat ps {};
    struct stat ds {};
    const std::string pass_name = e.key_hex + std::string(store::k_passport_suffix);
    if (io::fstatat(shard_fd, pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(ps.st_mode)) {
      continue;
    }
    if (io::fstatat(shard_fd, e.key_hex.c_str(), &ds, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(ds.st_mode)) {
      continue;  // a passport without payload: a bad entry, left to get/verify
    }
    e.last_used_ns = mtime_ns(ps);
    e.pass_ino = static_cast<std::uint64_t>(ps.st_ino);
    e.bytes = static_cast<std::uint64_t>(ps.st_size + ds.st_size);
    e.cost_us = store::decode_cost_nanos(ds.st_mtim.tv_nsec).value_or(0);
    e.uses = store::decode_uses_nanos(ps.st_mtim.tv_nsec);
    e.pinned = std::binary_search(pins.begin(), pins.end(), e.key_hex);
    bytes += static_cast<std::int64_t>(e.bytes);
    complete.push_back(std::move(e));
  }
  // Orphan payloads: under the shard lock no writer is between its two renames.
  // (Looked up in the sorted key list: a linear search per payload made a
  // scan quadratic in the entries of a shard.)
  std::vector<std::string_view> complete_keys;
  complete_keys.reserve(complete.size());
  for (const auto& e : complete) {
    complete_keys.emplace_back(e.key_hex);
  }
  std::sort(complete_keys.begin(), complete_keys.end());
  for (const auto& name : orphans == Orphans::remove ? payloads : std::vector<std::string>{}) {
    const bool has_pass = std::binary_search(complete_keys.begin(), complete_keys.end(), std::string_view(name));
    if (!has_pass) {
      struct stat ps {};
      const std::string pass_name = name + std::string(store::k_passport_suffix);
      if (io::fstatat(shard_fd, pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) != 0) {
        io::unlinkat(shard_fd, name.c_str(), 0);
      }
    }
  }
  // Pin markers of entries that are gone (removed behind kcache's back).
  for (const auto& key_hex : orphans == Orphans::remove ? pins : std::vector<std::string>{}) {
    struct stat ps {};
    const std::string pass_name = key_hex + std::string(store::k_passport_suffix);
    if (io::fstatat(shard_fd, pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) != 0) {
      io::unlinkat(shard_fd, (key_hex + std::string(store::k_pin_suffix)).c_str(), 0);
    }
  }
  if (recount == Recount::yes) {
    counters->shard_set(shard, bytes, static_cast<std::int64_t>(complete.size()));
  }
  return complete;
}

void FileStore::Impl::recount_all() {
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pinned_entries = 0;
  for (unsigned shard = 0; shard < store::k_shard_count; ++shard) {
    int err = 0;
    util::Fd fd = open_shard(shard, CreateShard::no, err);
    if (!fd) {
      counters->shard_set(shard, 0, 0);
      continue;
    }
    ShardLock lock(fd.get(), LOCK_EX);
    if (lock.held()) {
      for (const auto& e : scan_shard_locked(shard, fd.get())) {
        pinned_bytes += e.pinned ? e.bytes : 0;
        pinned_entries += e.pinned ? 1 : 0;
      }
    }
  }
  // Pins are counted in two words for the whole cache (no room for one per
  // shard in stats/counters): a pin taken while this runs may be counted
  // twice or not at all until the next recount (prune, verify --repair).
  counters->set(Counter::pinned_bytes, pinned_bytes);
  counters->set(Counter::pinned_entries, pinned_entries);
}

std::uint64_t FileStore::Impl::scan_into(unsigned shard, std::vector<ScannedEntry>& window) {
  int err = 0;
  util::Fd fd = open_shard(shard, CreateShard::no, err);
  if (!fd) {
    return 0;
  }
  ShardLock lock(fd.get(), LOCK_EX);
  if (!lock.held()) {
    return 0;
  }
  std::uint64_t bytes = 0;
  for (auto& e : scan_shard_locked(shard, fd.get())) {
    if (e.pinned) {
      continue;  // never a candidate, and not part of the window's cut
    }
    bytes += e.bytes;
    window.push_back(std::move(e));
  }
  return bytes;
}

std::pair<std::uint64_t, std::uint64_t> FileStore::Impl::evict_oldest(std::vector<ScannedEntry>& window,
                                                                      std::uint64_t want) {
  rank_for_eviction(window, options.eviction_policy, now_unix_ns());
  std::uint64_t removed = 0;
  std::uint64_t freed = 0;
  for (const auto& e : window) {
    if (freed >= want) {
      break;
    }
    int err = 0;
    util::Fd fd = open_shard(e.shard, CreateShard::no, err);
    if (!fd) {
      continue;
    }
    ShardLock lock(fd.get(), LOCK_EX);
    if (!lock.held()) {
      continue;
    }
    struct stat ps {};
    const std::string pass_name = e.key_hex + std::string(store::k_passport_suffix);
    if (io::fstatat(fd.get(), pass_name.c_str(), &ps, AT_SYMLINK_NOFOLLOW) != 0 ||
        static_cast<std::uint64_t>(ps.st_ino) != e.pass_ino || mtime_ns(ps) != e.last_used_ns) {
      continue;  // replaced or used since the scan: not a candidate any more
    }
    struct stat pin {};
    const std::string pin_name = e.key_hex + std::string(store::k_pin_suffix);
    if (io::fstatat(fd.get(), pin_name.c_str(), &pin, AT_SYMLINK_NOFOLLOW) == 0) {
      continue;  // pinned since the scan (pin takes the shard lock, as this does)
    }
    if (remove_locked(e.shard, fd.get(), e.key_hex, &ps)) {
      counters->add(Counter::evictions);
      ++removed;
      freed += e.bytes;
    }
  }
  return {removed, freed};
}

std::pair<std::uint64_t, std::uint64_t> FileStore::Impl::evict_to(std::uint64_t target) {
  std::uint64_t removed = 0;
  std::uint64_t freed = 0;
  const std::uint64_t total = counters->total_bytes();
  if (total <= target) {
    return {0, 0};
  }
  const std::uint64_t excess = total - target;
  for (unsigned start = 0; start < store::k_shard_count && freed < excess; start += k_window) {
    std::vector<ScannedEntry> window;
    std::uint64_t window_bytes = 0;
    for (unsigned shard = start; shard < start + k_window; ++shard) {
      window_bytes += scan_into(shard, window);
    }
    // This window's share of the excess: the live excess (bytes added
    // meanwhile are paid for too) in proportion to the window's part of the
    // bytes in the windows not visited yet (their shard words; this window's
    // are exact after its scan), so that the windows together pay it all.
    std::uint64_t not_visited = 0;
    for (unsigned shard = start; shard < store::k_shard_count; ++shard) {
      not_visited += counters->shard_bytes(shard);
    }
    const std::uint64_t live_total = counters->total_bytes();
    const std::uint64_t now_excess = live_total > target ? live_total - target : 0;
    std::uint64_t share =
        start + k_window >= store::k_shard_count || not_visited <= window_bytes
            ? now_excess
            : static_cast<std::uint64_t>(static_cast<long double>(now_excess) * window_bytes / not_visited) + 1;
    share = std::min(share, now_excess);
    const auto [n, bytes] = evict_oldest(window, share);
    removed += n;
    freed += bytes;
  }
  return {removed, freed};
}

std::pair<std::uint64_t, std::uint64_t> FileStore::Impl::evict_step(std::uint64_t goal) {
  // The cut is at least 1 % of the window (a watermark of 100 % would make
  // every window grow to the whole cache).
  const unsigned pct = std::min(99U, std::max(1U, options.low_watermark_percent));
  const unsigned first = counters->evict_hand();
  std::vector<ScannedEntry> window;
  std::uint64_t window_bytes = 0;
  unsigned visited = 0;
  // The window: shards in turn from the hand until it holds a sample of
  // k_evict_sample entries and its cut covers the goal (or every shard is in).
  while (visited < store::k_shard_count &&
         (visited == 0 || window.size() < k_evict_sample || window_bytes / 100 * (100 - pct) < goal)) {
    window_bytes += scan_into((first + visited) % store::k_shard_count, window);
    ++visited;
  }
  counters->set_evict_hand(first + visited);
  const std::uint64_t cut = window_bytes / 100 * (100 - pct) + window_bytes % 100 * (100 - pct) / 100;
  const auto result = evict_oldest(window, std::max(goal, cut));
  if (first + visited >= store::k_shard_count) {
    sweep_temps();  // once per turn of the hand: leftovers of writers that are gone
  }
  return result;
}

void FileStore::Impl::maybe_evict() {
  const std::uint64_t cap = entry_budget(options.max_size_bytes);
  if (cap == 0 || counters->total_bytes() <= cap) {
    return;
  }
  const int lock_fd = evict_lock();
  if (lock_fd < 0) {
    return;
  }
  // Writers must not outrun eviction: a writer that leaves the store above
  // its cap waits for the evict lock (held by whoever is evicting) and then
  // evicts itself if still needed, in steps of bounded work (evict_step), so
  // many writers under one cap are held back to the speed of eviction
  // (docs/on-disk-format.md).
  while (counters->total_bytes() > cap) {
    // flock excludes processes; threads of this process share the evict lock descriptor,
    // so they also take evict_mutex.
    std::lock_guard<std::mutex> thread_guard(evict_mutex);
    if (counters->total_bytes() <= cap) {
      return;  // another thread evicted while this one waited
    }
    if (io::lock(lock_fd, LOCK_EX) != 0) {
      return;  // cannot lock: leave eviction to the next writer
    }
    std::uint64_t removed = 0;
    for (std::uint64_t total = counters->total_bytes(); total > cap; total = counters->total_bytes()) {
      const auto step = evict_step(total - cap);
      removed += step.first;
      if (step.first == 0) {
        break;  // nothing evictable (entries vanished or the accounting was stale and is now exact)
      }
    }
    ::flock(lock_fd, LOCK_UN);
    if (removed == 0) {
      // Nothing could go: what is left is pinned (puts were refused before
      // staging, see check_pins_leave_room) or cannot be removed; another
      // round would find the same.
      return;
    }
  }
}

int FileStore::Impl::make_room(std::uint64_t bytes) {
  const std::uint64_t cap = entry_budget(options.max_size_bytes);
  if (cap == 0 || !counters->shared() || bytes > cap) {
    return -1;
  }
  // Bytes published or reserved. The reservations are read first: a put in
  // flight adds its bytes to the total before it frees its room, so one that
  // publishes between the two reads is counted once or twice, never missed
  // (reading the total first could miss it, and let one entry too many in).
  const auto in_use = [&] {
    const std::uint64_t reserved = counters->reserved_bytes();
    return counters->total_bytes() + reserved;
  };
  // Fast path, without the evict lock: reserve, then look. Reservations and
  // these loads are sequentially consistent, so of two writers racing for the
  // last room at least one sees the other's reservation and takes the slow path.
  if (const int slot = counters->reserve_room(bytes); slot >= 0) {
    if (in_use() <= cap) {
      return slot;
    }
    counters->release_room(slot);
  }
  // The slow path evicts under the evict lock, opened (created) only here: a
  // put that finds room takes none (the first put into a new directory makes
  // no stats/evict.lock).
  const int lock_fd = evict_lock();
  if (lock_fd < 0) {
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    {
      std::lock_guard<std::mutex> thread_guard(evict_mutex);
      if (io::lock(lock_fd, LOCK_EX) != 0) {
        return -1;
      }
      // Reserve first here too, then look: a writer on the fast path that
      // reserves while this one evicts sees this reservation, and this one
      // sees its (looking first and reserving after would let both take the
      // same room).
      const int slot = counters->reserve_room(bytes);
      if (slot < 0) {
        ::flock(lock_fd, LOCK_UN);
        return -1;
      }
      // Evict ahead, in steps of bounded work, until the entries in flight,
      // this one included, fit (each step also frees its window's cut, so the
      // next puts find room without evicting).
      for (std::uint64_t need = in_use(); need > cap; need = in_use()) {
        if (evict_step(need - cap).first == 0) {
          break;
        }
      }
      const std::uint64_t all = counters->reserved_bytes();
      std::uint64_t others = all - std::min(bytes, all);
      if (counters->total_bytes() + all > cap && others != 0) {
        others -= std::min(others, counters->reclaim_dead_rooms());
      }
      // With nothing else in flight the entry goes ahead even if the cache
      // could not be brought low enough (maybe_evict settles it after).
      if (counters->total_bytes() + others + bytes <= cap || others == 0 ||
          std::chrono::steady_clock::now() > deadline) {
        ::flock(lock_fd, LOCK_UN);
        return slot;
      }
      counters->release_room(slot);
      ::flock(lock_fd, LOCK_UN);
    }
    // Other writers' entries in flight fill the cap: wait for them to publish.
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

bool FileStore::Impl::temp_is_stale(std::string_view name, const struct stat& st, std::int64_t now_ns,
                                    util::PidCheck check) const {
  const bool old = now_ns - mtime_ns(st) >= static_cast<std::int64_t>(options.stale_temp_age.count()) * 1'000'000'000;
  if (const auto writer = store::temp_writer(name)) {
    switch (util::liveness_of(*writer, old ? util::PidCheck::full : check)) {
      case util::Liveness::alive: return false;  // however old: a put may stream for hours
      case util::Liveness::gone: return true;
      case util::Liveness::unknown: break;      // another machine, boot or pid namespace
    }
  }
  return old;
}

TempScan FileStore::Impl::scan_temps(TempSweep sweep, std::vector<std::string>* stale_names) {
  TempScan scan;
  if (!tmp_fd) {
    return scan;
  }
  const std::int64_t now_ns = now_unix_ns();
  for_each_dir_entry(tmp_fd.get(), [&](std::string_view name, unsigned char) {
    const std::string n(name);
    struct stat st {};
    if (io::fstatat(tmp_fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) {
      return;
    }
    const auto bytes = static_cast<std::uint64_t>(S_ISREG(st.st_mode) ? st.st_size : 0);
    ++scan.files;
    scan.bytes += bytes;
    if (!temp_is_stale(name, st, now_ns,
                       sweep == TempSweep::remove_quick ? util::PidCheck::exists : util::PidCheck::full)) {
      return;
    }
    ++scan.stale_files;
    scan.stale_bytes += bytes;
    if (stale_names != nullptr) {
      const auto writer = store::temp_writer(name);
      const bool gone = writer && util::liveness_of(*writer) == util::Liveness::gone;
      stale_names->push_back("v1/tmp/" + n + ": temporary file (" + std::to_string(bytes) + " bytes) of " +
                             (gone ? "a writer that is gone (pid " + std::to_string(writer->pid) + ")"
                                   : std::string("a writer kcache cannot check, older than stale_temp_age")));
    }
    if (sweep != TempSweep::count && io::unlinkat(tmp_fd.get(), n.c_str(), 0) == 0) {
      ++scan.removed;
    }
  });
  return scan;
}

// ---------------------------------------------------------------- public maintenance

Result<PruneReport> FileStore::prune(std::uint64_t max_size_bytes) {
  Impl& m = *m_impl;
  // A cap of 0 is "no cap"; a cap smaller than the metadata leaves a budget
  // of 0 for entries, which prunes every entry.
  const std::uint64_t cap = max_size_bytes != 0 ? max_size_bytes : m.options.max_size_bytes;
  const bool capped = cap != 0;
  const std::uint64_t target = m.entry_budget(cap);
  PruneReport report;
  const int lock_fd = m.evict_lock();
  if (lock_fd < 0) {
    return make_error(ErrorCode::read_only, "the cache at " + m.options.root.string() + " cannot be pruned (no v1/stats)");
  }
  if (int e = io::lock(lock_fd, LOCK_EX); e != 0) {
    return make_errno_error(e, "cannot take the eviction lock");
  }
  m.recount_all();
  bool stuck = false;  // over the target with nothing left to evict
  if (capped) {
    while (m.counters->total_bytes() > target) {
      const auto [n, bytes] = m.evict_to(target);
      report.entries_removed += n;
      report.bytes_removed += bytes;
      if (n == 0) {
        stuck = m.counters->total_bytes() > target;
        break;
      }
    }
  }
  m.sweep_temps();
  ::flock(lock_fd, LOCK_UN);
  report.size_after = m.counters->total_bytes();
  // A writer that published after the loop may have put the cache above the target
  // again: that is the next eviction's business, not a failed prune.
  if (capped && stuck && report.size_after > target) {
    // Nothing more could be evicted: say why (a shard that cannot be written)
    // rather than report a prune that did not happen.
    int why = EIO;
    for (unsigned shard = 0; shard < store::k_shard_count; ++shard) {
      int err = 0;
      util::Fd fd = m.open_shard(shard, CreateShard::no, err);
      if (fd && ::faccessat(fd.get(), ".", W_OK, AT_EACCESS) != 0) {
        why = errno;
        break;
      }
    }
    if (const std::uint64_t pinned_bytes = m.counters->get(Counter::pinned_bytes); pinned_bytes != 0) {
      return make_error(ErrorCode::no_space,
                        "cannot prune the cache at " + m.options.root.string() + " to " + std::to_string(target) +
                            " bytes: removed " + std::to_string(report.entries_removed) + " entries; what is left (" +
                            std::to_string(report.size_after) + " bytes) includes " + std::to_string(pinned_bytes) +
                            " bytes of pinned entries, which are never evicted: unpin some (`kcache unpin KEY`) or "
                            "prune to a larger size");
    }
    return make_errno_error(why, "cannot prune the cache at " + m.options.root.string() + ": removed " +
                                     std::to_string(report.entries_removed) + " entries, it still holds " +
                                     std::to_string(report.size_after) + " bytes, above " + std::to_string(target));
  }
  return report;
}

Result<std::uint64_t> FileStore::clear(ClearPinned pinned) {
  Impl& m = *m_impl;
  std::uint64_t removed = 0;
  std::uint64_t not_removed = 0;
  int failed_errno = 0;
  for (unsigned shard = 0; shard < store::k_shard_count; ++shard) {
    int err = 0;
    util::Fd fd = m.open_shard(shard, CreateShard::no, err);
    if (!fd) {
      continue;
    }
    ShardLock lock(fd.get(), LOCK_EX);
    if (!lock.held()) {
      return make_errno_error(lock.error(), "cannot lock shard " + store::shard_name(shard));
    }
    std::vector<std::string> keys;
    std::vector<std::string> pins;
    for_each_dir_entry(fd.get(), [&](std::string_view name, unsigned char) {
      std::string_view key_hex;
      const auto kind = store::classify_entry_name(name, shard, key_hex);
      if (kind == store::EntryName::pin) {
        pins.emplace_back(key_hex);
      } else if (kind != store::EntryName::junk) {
        keys.emplace_back(key_hex);
      }
    });
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::sort(pins.begin(), pins.end());
    std::uint64_t kept = 0;
    bool pins_kept = false;
    for (const auto& key_hex : keys) {
      if (pinned == ClearPinned::keep && std::binary_search(pins.begin(), pins.end(), key_hex)) {
        pins_kept = true;  // stays, pin and all
        continue;
      }
      if (m.remove_locked(shard, fd.get(), key_hex, nullptr)) {
        ++removed;
      } else if (!entry_file_left(fd.get(), key_hex)) {
        // Nothing of it is left: an orphan payload remove_locked took, or an entry removed
        // behind the store's back since the listing. Not an entry, not a failure.
      } else {
        failed_errno = failed_errno != 0 ? failed_errno : errno;
        ++kept;
      }
    }
    if (kept == 0 && !pins_kept) {
      m.counters->shard_set(shard, 0, 0);
    } else if (kept == 0) {
      m.scan_shard_locked(shard, fd.get());  // count the pinned entries that stay
    } else {
      not_removed += kept;
      m.scan_shard_locked(shard, fd.get());  // count what is still there
    }
  }
  m.sweep_temps();
  if (not_removed != 0) {
    return make_errno_error(failed_errno != 0 ? failed_errno : EIO,
                            "cannot clear the cache at " + m.options.root.string() + ": " +
                                std::to_string(not_removed) + " entries could not be removed (" +
                                std::to_string(removed) + " were)");
  }
  return removed;
}

// ---------------------------------------------------------------- layout repair

Result<std::vector<std::string>> FileStore::repair_layout(const FileStoreOptions& options) {
  std::vector<std::string> repaired;
  const auto& root = options.root;
  if (root.empty()) {
    return repaired;
  }
  // Only a root that open() would take: never a symlink, never another user's.
  util::Fd root_fd(io::openat(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  struct stat root_st {};
  if (!root_fd || io::fstat(root_fd.get(), &root_st) != 0 ||
      (root_st.st_uid != ::geteuid() && options.sharing != Sharing::group)) {
    return repaired;  // open() says what is wrong with it
  }
  const mode_t dmode = store::dir_mode(options.sharing);
  const std::string stamp = std::to_string(now_unix_ms() / 1000);
  // Renames `name` under `parent` (shown as `prefix` + name) aside when it is
  // not a directory, and creates the directory anew.
  auto repair = [&](int parent, const char* name, const std::string& prefix) -> Result<void> {
    struct stat st {};
    if (io::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) {
      return {};
    }
    const std::string shown = prefix + name;
    std::string aside;
    for (int n = 0;; ++n) {
      aside = std::string(name) + std::string(store::k_broken_suffix) + stamp + (n == 0 ? "" : "-" + std::to_string(n));
      struct stat taken {};
      if (io::fstatat(parent, aside.c_str(), &taken, AT_SYMLINK_NOFOLLOW) != 0) {
        break;
      }
    }
    // rename() moves the name itself: a symlink is moved, never followed.
    if (io::renameat(parent, name, parent, aside.c_str()) != 0) {
      return make_errno_error(errno, "cannot move " + (root / shown).string() + " aside");
    }
    if (io::mkdirat(parent, name, dmode) != 0 && errno != EEXIST) {
      return make_errno_error(errno, "cannot create the directory " + (root / shown).string());
    }
    if (util::Fd dir(io::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)); dir) {
      io::fchmod(dir.get(), dmode);  // umask-proof, as open() makes its directories
    }
    repaired.push_back(shown + " was " + describe_file_type(st.st_mode) + ", not a directory: moved aside to " +
                       prefix + aside + " (kcache does not use or remove it) and created anew");
    return {};
  };
  if (auto ok = repair(root_fd.get(), store::k_version_dir, ""); !ok) {
    return tl::unexpected(ok.error());
  }
  util::Fd v1(io::openat(root_fd.get(), store::k_version_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  if (!v1) {
    return repaired;  // not there yet: open() creates it
  }
  for (const char* name : {store::k_entries_dir, store::k_tmp_dir, store::k_locks_dir, store::k_stats_dir,
                           store::k_toolkit_dir}) {
    if (auto ok = repair(v1.get(), name, std::string(store::k_version_dir) + "/"); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  return repaired;
}

}  // namespace kcache
