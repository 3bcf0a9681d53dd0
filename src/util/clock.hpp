// util/clock.hpp: the monotonic clock kcache times its own work with.
#pragma once

#include <chrono>
#include <cstdint>

namespace kcache::util {

using Clock = std::chrono::steady_clock;

// Whole microseconds from `start` to now.
inline std::uint64_t micros_since(Clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace kcache::util
