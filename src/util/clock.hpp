// util/clock.hpp: the monotonic clock kcache times its own work with, and the
// wall clock that file times are compared against.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace kcache::util {

using Clock = std::chrono::steady_clock;

// Whole microseconds from `start` to now.
inline std::uint64_t micros_since(Clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

// Nanoseconds since the epoch (CLOCK_REALTIME, the clock of file times).
inline std::int64_t realtime_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace kcache::util
