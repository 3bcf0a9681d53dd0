// kcache pin KEY... / kcache unpin KEY...: keep entries from eviction by the
// size cap (FileStore::pin), or let them go again.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace kcache::cli {
namespace {

enum class PinAction { pin, unpin };

// Says so when pinned entries alone fill what the cap leaves for entries.
void warn_if_pins_over_cap(const StoreStats& s) {
  if (s.pins_over_cap) {
    note("warning: pinned entries hold " + std::to_string(s.pinned_bytes) + " bytes, all the cap (max_size " +
         std::to_string(s.max_size_bytes) +
         " bytes, less metadata) leaves for entries: new entries are not stored until you unpin some "
         "(`kcache unpin KEY`) or raise max_size");
  }
}

int run_pin(const Context& ctx, const std::vector<std::string>& texts, PinAction action) {
  std::vector<Key> keys;
  if (int rc = parse_keys(texts, keys); rc != k_exit_ok) {
    return rc;
  }
  auto store = open_file_store(ctx);
  if (!store) {
    return report(store.error());
  }
  std::uint64_t changed = 0;
  std::uint64_t unchanged = 0;
  std::uint64_t missing = 0;
  for (const Key& key : keys) {
    auto done = action == PinAction::pin ? (*store)->pin(key) : (*store)->unpin(key);
    if (!done && done.error().code == ErrorCode::not_found) {
      ++missing;
      note("no entry " + key.hex() + " in the cache: not pinned (store it first)");
      continue;
    }
    if (!done) {
      return report(done.error());
    }
    ++(*done ? changed : unchanged);
    if (!ctx.json) {
      const char* verb = action == PinAction::pin ? (*done ? "pinned" : "already pinned")
                                                  : (*done ? "unpinned" : "not pinned");
      std::printf("%s %s\n", verb, key.hex().c_str());
    }
  }
  auto s = (*store)->stats();
  if (!s) {
    return report(s.error());
  }
  if (ctx.json) {
    nlohmann::json j{{action == PinAction::pin ? "pinned" : "unpinned", changed},
                     {action == PinAction::pin ? "already_pinned" : "not_pinned", unchanged},
                     {"pinned_entries", s->pinned_entries},
                     {"pinned_bytes", s->pinned_bytes},
                     {"pins_over_cap", s->pins_over_cap}};
    if (action == PinAction::pin) {
      j["missing"] = missing;
    }
    std::printf("%s\n", j.dump().c_str());
  }
  warn_if_pins_over_cap(*s);
  return missing != 0 ? k_exit_miss : k_exit_ok;
}

void register_pin(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto keys = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand("pin", "Keep entries in the on-disk cache: the size cap never evicts them");
  sub->add_option("KEY", *keys, "Keys of stored entries: 64 lowercase hex characters each")->required();
  sub->footer("Exit 3 when an entry is not in the cache (the others are pinned). `kcache clear` keeps pinned "
              "entries unless --include-pinned; `kcache stats` shows them.");
  sub->callback([&ctx, &run, keys] { run = [&ctx, keys] { return run_pin(ctx, *keys, PinAction::pin); }; });
}

void register_unpin(CLI::App& app, Context& ctx, std::function<int()>& run) {
  auto keys = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand("unpin", "Let pinned entries be evicted by the size cap again");
  sub->add_option("KEY", *keys, "Keys: 64 lowercase hex characters each")->required();
  sub->callback([&ctx, &run, keys] { run = [&ctx, keys] { return run_pin(ctx, *keys, PinAction::unpin); }; });
}

}  // namespace

KCACHE_COMMAND(pin, register_pin);
KCACHE_COMMAND(unpin, register_unpin);

}  // namespace kcache::cli
