#include "util/unique_name.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>

#include "util/hex.hpp"

namespace kcache::util {

namespace {

// splitmix64's finaliser: spreads every input bit over the whole word.
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::atomic<std::uint64_t> g_counter{0};

}  // namespace

std::uint64_t unique_nonce() noexcept {
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto wall = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const auto aslr = reinterpret_cast<std::uintptr_t>(&g_counter);
  const std::uint64_t n = g_counter.fetch_add(1, std::memory_order_relaxed);
  return mix(mix(now ^ (wall << 1)) ^ mix(static_cast<std::uint64_t>(::getpid()) ^ (aslr << 16)) ^ mix(n));
}

std::string temp_suffix() {
  const std::uint64_t v = unique_nonce();
  return std::to_string(::getpid()) + "-" + to_hex(reinterpret_cast<const std::uint8_t*>(&v), sizeof v);
}

}  // namespace kcache::util
