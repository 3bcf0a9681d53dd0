// The tier kinds of kcache/store.hpp, the per-thread note of which tier
// served the last hit of a chain, and Store::get_shared's default.
#include <array>
#include <memory>
#include <utility>

#include "kcache/store.hpp"

namespace kcache {

namespace {
constexpr std::array<std::string_view, k_tier_count> k_tier_names{"memory", "disk", "bundle", "remote"};
thread_local std::optional<Tier> t_served;
}  // namespace

std::string_view to_string(Tier tier) noexcept {
  const auto i = static_cast<unsigned>(tier);
  return i < k_tier_count ? k_tier_names[i] : std::string_view("?");
}

std::optional<Tier> parse_tier(std::string_view name) noexcept {
  for (unsigned i = 0; i < k_tier_count; ++i) {
    if (k_tier_names[i] == name) {
      return static_cast<Tier>(i);
    }
  }
  return std::nullopt;
}

std::optional<Tier> Store::last_served_tier() noexcept { return t_served; }

void Store::note_served_tier(std::optional<Tier> tier) noexcept { t_served = tier; }

Result<std::shared_ptr<const Artifact>> Store::get_shared(const Key& key) {
  auto got = get(key);
  if (!got) {
    return tl::unexpected(std::move(got.error()));
  }
  if (!got->has_value()) {
    return std::shared_ptr<const Artifact>{};
  }
  return std::shared_ptr<const Artifact>(std::make_shared<Artifact>(std::move(**got)));
}

}  // namespace kcache
