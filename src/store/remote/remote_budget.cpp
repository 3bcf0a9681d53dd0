#include "store/remote/remote_budget.hpp"

#include <map>
#include <mutex>
#include <utility>

namespace kcache::remote {

std::shared_ptr<RemoteBudget> RemoteBudget::for_process(const std::string& scope, std::chrono::milliseconds limit) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<RemoteBudget>> budgets;
  std::lock_guard lock(mutex);
  auto& slot = budgets[scope];
  if (auto b = slot.lock()) {
    return b;
  }
  auto b = std::make_shared<RemoteBudget>(limit);
  slot = b;
  return b;
}

bool RemoteBudget::spend(std::chrono::steady_clock::duration elapsed) noexcept {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  if (us <= 0 || m_limit_us == 0) {
    return false;
  }
  const std::uint64_t before = m_spent_us.fetch_add(static_cast<std::uint64_t>(us), std::memory_order_relaxed);
  return before < m_limit_us && before + static_cast<std::uint64_t>(us) >= m_limit_us;
}

namespace {
thread_local std::chrono::steady_clock::duration t_failover_wait{};
}  // namespace

void add_failover_wait(std::chrono::steady_clock::duration waited) noexcept { t_failover_wait += waited; }

std::chrono::steady_clock::duration take_failover_wait() noexcept {
  return std::exchange(t_failover_wait, std::chrono::steady_clock::duration{});
}

}  // namespace kcache::remote
