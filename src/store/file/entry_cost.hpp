// store/file/entry_cost.hpp: the rebuild cost of an entry, kept where an eviction
// scan sees it for free: in the nanoseconds of its payload file's mtime.
//
// Format (docs/on-disk-format.md, "Rebuild cost"): when an entry is published,
// its payload's mtime is set to
//
//   mtime    := SECONDS "." NANOS            SECONDS: the time of the put
//   NANOS    := COST_MS * 1000 + TAG         COST_MS in 0..999999 (milliseconds of the
//                                            passport's compile_duration_us, rounded up,
//                                            at most 999999: about 16.7 minutes)
//   TAG      := 1 + (COST_MS * 7919) mod 997 in 1..997, so that 0 nanoseconds (a
//                                            filesystem that keeps whole seconds) and
//                                            mtimes not set by kcache read as unknown
//
// A payload whose NANOS do not carry the tag (written by an older kcache, or
// on a filesystem that keeps coarser times) has an unknown cost, which the
// cost policy treats as 0 (cheapest to rebuild). The payload's mtime is not
// used for anything else: an entry's last use is its passport's mtime.
//
// The uses of an entry (for eviction_policy = cost) are kept the same way, in
// the passport's mtime, which is the entry's last use (docs/on-disk-format.md,
// "Uses"): a put, and a hit that refreshes the last use (at most once per
// touch_interval), set it to
//
//   mtime     := SECONDS "." MICROS USES_CODE   SECONDS.MICROS: the time of the put or use
//   USES_CODE := USES * 20 + CHECK              3 digits; USES in 1..49 (saturating): the
//                                               put (1) plus the refreshes of the last use
//   CHECK     := (USES * 13 + 7) mod 20         so that most mtimes not set this way
//                                               (an older kcache) read as unknown
//
// An mtime without the check reads as 1 use. Counting refreshes, not hits,
// bounds the count by time: a burst of hits within one touch_interval is one
// use.
#pragma once

#include <cstdint>
#include <optional>

namespace kcache::store {

inline constexpr std::uint64_t k_cost_max_ms = 999'999;

inline std::uint64_t cost_tag(std::uint64_t cost_ms) noexcept {
  return 1 + (cost_ms * 7919) % 997;
}

// The nanoseconds field of the payload's mtime that records `cost_us`.
inline long encode_cost_nanos(std::uint64_t cost_us) noexcept {
  std::uint64_t ms = (cost_us + 999) / 1000;
  ms = ms > k_cost_max_ms ? k_cost_max_ms : ms;
  return static_cast<long>(ms * 1000 + cost_tag(ms));
}

// The rebuild cost in microseconds recorded in `nanos`, or nullopt when the
// field does not carry kcache's tag.
inline std::optional<std::uint64_t> decode_cost_nanos(long nanos) noexcept {
  if (nanos <= 0 || nanos >= 1'000'000'000) {
    return std::nullopt;
  }
  const auto n = static_cast<std::uint64_t>(nanos);
  const std::uint64_t ms = n / 1000;
  if (n % 1000 != cost_tag(ms)) {
    return std::nullopt;
  }
  return ms * 1000;
}

inline constexpr std::uint64_t k_uses_max = 49;

inline long uses_check(std::uint64_t uses) noexcept {
  return static_cast<long>((uses * 13 + 7) % 20);
}

// The uses recorded in the passport mtime's nanoseconds `nanos`: 1 when the
// field does not carry the check.
inline std::uint64_t decode_uses_nanos(long nanos) noexcept {
  if (nanos < 0 || nanos >= 1'000'000'000) {
    return 1;
  }
  const long code = nanos % 1000;
  const auto uses = static_cast<std::uint64_t>(code / 20);
  return uses >= 1 && code % 20 == uses_check(uses) ? uses : 1;
}

// The nanoseconds of a passport mtime at `now_nanos` (of the current second)
// that record `uses` (saturating at k_uses_max).
inline long encode_uses_nanos(long now_nanos, std::uint64_t uses) noexcept {
  uses = uses < 1 ? 1 : uses > k_uses_max ? k_uses_max : uses;
  return now_nanos / 1000 * 1000 + static_cast<long>(uses * 20) + uses_check(uses);
}

}  // namespace kcache::store
