// kcache stats [--json]: the shared counters of the on-disk cache, led by the
// requests and how they ended (docs/cli.md, "kcache stats").
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/interposed_counters.hpp"
#include "nvcc/nvcc_counters.hpp"
#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "kcache/remote_stats.hpp"
#include "kcache/request_stats.hpp"
#include "store/remote/remote_breaker.hpp"

namespace kcache::cli {
namespace {

nlohmann::json remote_json(const RemoteTierStats& r) {
  return {{"server", r.server},
          {"breaker", r.breaker},
          {"open_until_ms", r.open_until_ms},
          {"consecutive_failures", r.consecutive_failures},
          {"breaker_opened", r.breaker_opened},
          {"last_failure_ms", r.last_failure_ms},
          {"hits", r.hits},
          {"misses", r.misses},
          {"errors", r.errors},
          {"skipped", r.skipped},
          {"budget_skipped", r.budget_skipped},
          {"puts", r.puts},
          {"puts_already_present", r.puts_already_present},
          {"bytes_in", r.bytes_in},
          {"bytes_out", r.bytes_out},
          {"rejected", r.rejected},
          {"compile_us_saved", r.compile_us_saved},
          {"get_p50_us", r.get_p50_us},
          {"get_p99_us", r.get_p99_us},
          {"lease_taken", r.lease_taken},
          {"lease_waits", r.lease_waits},
          {"lease_waited_hits", r.lease_waited_hits},
          {"lease_takeovers", r.lease_takeovers},
          {"lease_foreign_takeovers", r.lease_foreign_takeovers},
          {"lease_timeouts", r.lease_timeouts},
          {"lease_errors", r.lease_errors},
          {"lease_lost", r.lease_lost},
          {"lease_stalls", r.lease_stalls}};
}

// What a remote's breaker does now, in words.
std::string breaker_words(const RemoteTierStats& r) {
  const std::uint64_t now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  std::string state;
  if (r.breaker == "open") {
    state = fmt::format("open: skipped for {} s more", (r.open_until_ms - std::min(now, r.open_until_ms) + 999) / 1000);
  } else if (r.breaker == "half-open") {
    state = "half-open: the next operation (in one process) probes it";
  } else {
    state = "closed: in use";
  }
  return fmt::format("{} ({} failure(s) in a row; opened {} time(s))", state, r.consecutive_failures,
                     r.breaker_opened);
}

void add_remote_rows(std::vector<std::vector<std::string>>& rows, const RemoteTierStats& r) {
  rows.push_back({"remote " + r.server, breaker_words(r)});
  rows.push_back({"  hits / misses", fmt::format("{} / {}", r.hits, r.misses)});
  rows.push_back({"  errors", fmt::format("{} ({} operations skipped, {} of them for the spent remote_budget_ms)",
                                          r.errors, r.skipped, r.budget_skipped)});
  rows.push_back({"  uploads", fmt::format("{} ({} already there), {} rejected entries", r.puts,
                                           r.puts_already_present, r.rejected)});
  rows.push_back({"  bytes in / out", format_size(r.bytes_in) + " / " + format_size(r.bytes_out)});
  rows.push_back({"  get p50 / p99", fmt::format("<= {} / <= {}", format_duration_us(r.get_p50_us),
                                                 format_duration_us(r.get_p99_us))});
  rows.push_back({"  leases", fmt::format("{} taken ({} after a dead owner, {} foreign taken over), {} waits ({} "
                                          "said why after 1 s), {} lease errors",
                                          r.lease_taken, r.lease_takeovers, r.lease_foreign_takeovers,
                                          r.lease_waits, r.lease_stalls, r.lease_errors)});
}

nlohmann::json requests_json(const RequestCounts& c) {
  nlohmann::json served{{"total", c.served_total()}, {"failed", c.served_failed}};
  for (unsigned t = 0; t < k_tier_count; ++t) {
    served[std::string(to_string(static_cast<Tier>(t)))] = c.served[t];
  }
  return {{"total", c.total()},       {"served", served},
          {"compiled", c.compiled},   {"uncached", c.uncached},
          {"failed", c.failed},       {"compile_us_saved", c.compile_us_saved},
          {"compile_us", c.compile_us}};
}

// "3 served (2 disk, 1 remote), 1 compiled": the outcomes that happened.
std::string outcome_words(const RequestCounts& c) {
  std::string tiers;
  for (unsigned t = 0; t < k_tier_count; ++t) {
    if (c.served[t] != 0) {
      tiers += fmt::format("{}{} {}", tiers.empty() ? "" : ", ", c.served[t], to_string(static_cast<Tier>(t)));
    }
  }
  if (c.served_failed != 0) {
    tiers += fmt::format("{}{} of a failed compile", tiers.empty() ? "" : "; ", c.served_failed);
  }
  std::string line = fmt::format("{} served{}, {} compiled", c.served_total(), tiers.empty() ? "" : " (" + tiers + ")",
                                 c.compiled);
  if (c.uncached != 0) {
    line += fmt::format(", {} uncached", c.uncached);
  }
  if (c.failed != 0) {
    line += fmt::format(", {} failed", c.failed);
  }
  return line;
}

// The rows that lead `kcache stats`: every request of this cache directory,
// how it ended, and per route.
void add_request_rows(std::vector<std::vector<std::string>>& rows, const RequestStats* stats) {
  if (stats == nullptr) {
    rows.push_back({"requests", "none counted yet"});
    return;
  }
  const auto routes = stats->routes();
  RequestCounts all;
  for (const auto& r : routes) {
    all += r.counts;
  }
  rows.push_back({"requests", fmt::format("{} (every route and process of this cache directory)", all.total())});
  rows.push_back({"  served", fmt::format("{}: memory {}, disk {}, bundle {}, remote {}{}", all.served_total(),
                                          all.served[0], all.served[1], all.served[2], all.served[3],
                                          all.served_failed != 0
                                              ? fmt::format(" ({} of them a failed compile, replayed)",
                                                            all.served_failed)
                                              : std::string())});
  rows.push_back({"  compiled", fmt::format("{} (compiled here and stored)", all.compiled)});
  rows.push_back({"  uncached", fmt::format("{} (compiled here, not stored: not cacheable, or the store failed)",
                                            all.uncached)});
  rows.push_back({"  failed", fmt::format("{} (the compile failed, or no toolkit)", all.failed)});
  rows.push_back({"  compile time saved", format_duration_us(all.compile_us_saved) + " (by the served requests)"});
  rows.push_back({"  compile time spent", format_duration_us(all.compile_us)});
  for (const auto& r : routes) {
    rows.push_back({"  route " + r.route, fmt::format("{}: {}", r.counts.total(), outcome_words(r.counts))});
  }
}

// The stand-in libraries' counters (`kcache run`, docs/run.md), when any
// process has used them with this cache: library -> event -> count.
std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::uint64_t>>>> interposed_stats(
    const std::filesystem::path& cache_dir) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::uint64_t>>>> out;
  std::error_code ec;
  if (!std::filesystem::exists(cache_dir / "v1" / "stats" / "interposed", ec)) {
    return out;
  }
  const auto counters = InterposedCounters::open(cache_dir);
  const char* names[] = {"nvrtc", "nvjitlink", "nvvm"};
  for (unsigned lib = 0; lib < k_interposed_libraries; ++lib) {
    std::vector<std::pair<std::string, std::uint64_t>> events;
    for (unsigned e = 0; e < static_cast<unsigned>(InterposedEvent::count_); ++e) {
      const auto event = static_cast<InterposedEvent>(e);
      events.emplace_back(std::string(to_string(event)), counters->get(lib, event));
    }
    out.emplace_back(names[lib], std::move(events));
  }
  return out;
}

int run_stats(const Context& ctx) {
  auto config = ctx.config();
  if (!config) {
    return report(config.error());
  }
  FileStoreOptions options = config->file_store_options();
  options.sweep_on_open = OpenSweep::no;  // stats shows the temporary files as they are
  auto store = FileStore::open(options);
  if (!store) {
    return report(store.error());
  }
  auto s = (*store)->stats();
  if (!s) {
    return report(s.error());
  }
  // The remote tier's counters (every process of this cache directory), when
  // a remote was ever used from it: the sum of each remote's own counters.
  std::unique_ptr<remote::RemoteCounters> rc;
  for (const auto& b : remote::RemoteBreaker::open_all_for_reading(config->cache_dir / "v1" / "stats")) {
    if (!rc) {
      rc = remote::RemoteCounters::in_process();
    }
    rc->add_all(b->counters());
  }
  using RC = remote::RemoteCounter;
  const std::vector<RemoteTierStats> remotes = remote_tier_stats(config->cache_dir);
  const auto requests = RequestStats::open_existing(config->cache_dir);
  const std::uint64_t lookups = s->hits + s->misses;
  const double hit_ratio = lookups == 0 ? 0.0 : static_cast<double>(s->hits) / static_cast<double>(lookups);
  if (ctx.json) {
    nlohmann::json req = requests_json(requests ? requests->total() : RequestCounts{});
    req["routes"] = nlohmann::json::object();
    if (requests) {
      for (const auto& r : requests->routes()) {
        req["routes"][r.route] = requests_json(r.counts);
      }
    }
    nlohmann::json j{{"requests", req},
                     {"cache_dir", config->cache_dir.string()},
                     {"entries", s->entries},
                     {"size_bytes", s->size_bytes},
                     {"metadata_bytes", s->metadata_bytes},
                     {"max_size_bytes", s->max_size_bytes},
                     {"hits", s->hits},
                     {"misses", s->misses},
                     {"hit_ratio", hit_ratio},
                     {"puts", s->puts},
                     {"puts_skipped", s->puts_skipped},
                     {"evictions", s->evictions},
                     {"corrupt", s->corrupt},
                     {"errors", s->errors},
                     {"bytes_read", s->bytes_read},
                     {"bytes_written", s->bytes_written},
                     {"compile_us_saved", s->compile_us_saved},
                     {"temp_files", s->temp_files},
                     {"temp_bytes", s->temp_bytes},
                     {"stale_temp_files", s->stale_temp_files},
                     {"stale_temp_bytes", s->stale_temp_bytes},
                     {"degraded", (*store)->degraded()},
                     {"pinned_entries", s->pinned_entries},
                     {"pinned_bytes", s->pinned_bytes},
                     {"pins_over_cap", s->pins_over_cap},
                     {"eviction_policy", eviction_policy_name(config->eviction_policy)}};
    if (rc) {
      nlohmann::json rej;
      const char* names[] = {"too_large", "malformed", "wrong_key", "unsigned", "unknown_signer", "bad_signature",
                             "corrupt"};
      for (unsigned i = 0; i < 7; ++i) {
        rej[names[i]] = rc->get(static_cast<RC>(static_cast<unsigned>(RC::rejected_too_large) + i));
      }
      j["remote"] = {{"hits", rc->get(RC::hits)},           {"misses", rc->get(RC::misses)},
                     {"errors", rc->get(RC::errors)},       {"skipped", rc->get(RC::skipped)},
                     {"puts", rc->get(RC::puts)},           {"puts_already_present", rc->get(RC::puts_present)},
                     {"puts_too_large", rc->get(RC::puts_too_large)},
                     {"bytes_in", rc->get(RC::bytes_in)},   {"bytes_out", rc->get(RC::bytes_out)},
                     {"rejected", rc->get(RC::rejected)},   {"rejected_by", rej},
                     {"get_p50_us", rc->latency_quantile(0.5)}, {"get_p99_us", rc->latency_quantile(0.99)},
                     {"compile_us_saved", rc->get(RC::compile_us_saved)},
                     {"lease_taken", rc->get(RC::lease_taken)},
                     {"lease_waits", rc->get(RC::lease_waits)},
                     {"lease_waited_hits", rc->get(RC::lease_waited_hits)},
                     {"lease_takeovers", rc->get(RC::lease_takeovers)},
                     {"lease_timeouts", rc->get(RC::lease_timeouts)},
                     {"lease_errors", rc->get(RC::lease_errors)},
                     {"lease_lost", rc->get(RC::lease_lost)},
                     {"lease_foreign_takeovers", rc->get(RC::lease_foreign_takeovers)},
                     {"lease_stalls", rc->get(RC::lease_stalls)},
                     {"budget_skipped", rc->get(RC::budget_skipped)},
                     {"breaker_opened", rc->get(RC::breaker_opened)}};
    }
    // Per remote: its breaker (shared by every process of this directory) and counters.
    nlohmann::json per = nlohmann::json::array();
    for (const RemoteTierStats& r : remotes) {
      per.push_back(remote_json(r));
    }
    j["remotes"] = per;
    for (const auto& [lib, events] : interposed_stats(config->cache_dir)) {
      for (const auto& [event, value] : events) {
        j["interposed"][lib][event] = value;
      }
    }
    if (const auto nv = nvcc::read_nvcc_stats(config->cache_dir)) {
      for (const auto& [name, value] : nv->outcomes) {
        j["nvcc"][name] = value;
      }
      j["nvcc"]["uncached_reasons"] = nlohmann::json::object();
      for (const auto& [name, value] : nv->uncached_reasons) {
        j["nvcc"]["uncached_reasons"][name] = value;
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return k_exit_ok;
  }
  const std::string cap = s->max_size_bytes == 0 ? "no cap" : format_size(s->max_size_bytes);
  const std::string pct =
      s->max_size_bytes == 0
          ? ""
          : fmt::format(" ({:.1f}%)", 100.0 * static_cast<double>(s->size_bytes) / static_cast<double>(s->max_size_bytes));
  std::vector<std::vector<std::string>> rows;
  add_request_rows(rows, requests.get());
  const std::vector<std::vector<std::string>> disk_rows{
      {"cache directory", config->cache_dir.string()},
      {"entries", std::to_string(s->entries)},
      {"size", format_size(s->size_bytes) + " of " + cap + pct},
      {"metadata", format_size(s->metadata_bytes) + " (shared counters and check table, under the cap)"},
      {"disk lookups", fmt::format("{} hits, {} misses (lookups inside requests, and `kcache get`)", s->hits,
                                   s->misses)},
      {"disk hit ratio", lookups == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * hit_ratio)},
      {"puts", std::to_string(s->puts)},
      {"puts skipped", std::to_string(s->puts_skipped)},
      {"evictions", std::to_string(s->evictions)},
      {"corrupt entries removed", std::to_string(s->corrupt)},
      {"errors", std::to_string(s->errors)},
      {"bytes read", format_size(s->bytes_read)},
      {"bytes written", format_size(s->bytes_written)},
      {"disk hits' compile time", format_duration_us(s->compile_us_saved)},
      {"temporary files",
       fmt::format("{} ({}), {} ({}) left by writers that are gone{}", s->temp_files, format_size(s->temp_bytes),
                   s->stale_temp_files, format_size(s->stale_temp_bytes),
                   s->stale_temp_files == 0 ? "" : ": `kcache verify --repair` removes them")},
  };
  rows.insert(rows.end(), disk_rows.begin(), disk_rows.end());
  if ((*store)->degraded()) {
    rows.push_back({"state", "degraded: writes are skipped"});
  }
  rows.push_back({"pinned", fmt::format("{} entries ({}), never evicted{}", s->pinned_entries,
                                        format_size(s->pinned_bytes),
                                        s->pins_over_cap ? ": OVER THE CAP, new entries are not stored" : "")});
  rows.push_back({"eviction policy", config->eviction_policy == EvictionPolicy::lru   ? "lru (least recently used first)"
                                     : config->eviction_policy == EvictionPolicy::gds ? "gds (cheapest to rebuild per byte first)"
                                                                                       : "cost (cheapest to rebuild per byte and use first)"});
  if (rc) {
    rows.push_back({"remote lookups", fmt::format("{} hits, {} misses", rc->get(RC::hits), rc->get(RC::misses))});
    rows.push_back({"remote errors", fmt::format("{} ({} skipped by the breaker)", rc->get(RC::errors),
                                                 rc->get(RC::skipped))});
    rows.push_back({"remote rejected entries", std::to_string(rc->get(RC::rejected))});
    rows.push_back({"remote uploads", fmt::format("{} ({} already there, {} over max_entry_size)", rc->get(RC::puts),
                                                  rc->get(RC::puts_present), rc->get(RC::puts_too_large))});
    rows.push_back({"remote bytes in / out",
                    format_size(rc->get(RC::bytes_in)) + " / " + format_size(rc->get(RC::bytes_out))});
    rows.push_back({"remote get p50 / p99", fmt::format("<= {} / <= {}", format_duration_us(rc->latency_quantile(0.5)),
                                                        format_duration_us(rc->latency_quantile(0.99)))});
    rows.push_back({"remote hits' compile time", format_duration_us(rc->get(RC::compile_us_saved))});
    rows.push_back({"remote leases taken", fmt::format("{} ({} after a dead or failed owner, {} lost while compiling)",
                                                       rc->get(RC::lease_taken), rc->get(RC::lease_takeovers),
                                                       rc->get(RC::lease_lost))});
    rows.push_back({"remote lease waits", fmt::format("{} ({} ended with the owner's entry, {} timed out, {} lease "
                                                      "errors)",
                                                      rc->get(RC::lease_waits), rc->get(RC::lease_waited_hits),
                                                      rc->get(RC::lease_timeouts), rc->get(RC::lease_errors))});
  }
  for (const RemoteTierStats& r : remotes) {
    add_remote_rows(rows, r);
  }
  for (const auto& [lib, events] : interposed_stats(config->cache_dir)) {
    std::string line;
    for (const auto& [event, value] : events) {
      line += (line.empty() ? "" : ", ") + std::to_string(value) + " " + event;
    }
    rows.push_back({"kcache run stand-in: " + lib, line});
  }
  if (const auto nv = nvcc::read_nvcc_stats(config->cache_dir)) {
    std::string line;
    for (const auto& [name, value] : nv->outcomes) {
      line += (line.empty() ? "" : ", ") + std::to_string(value) + " " + name;
    }
    std::string reasons;
    for (const auto& [name, value] : nv->uncached_reasons) {
      reasons += (reasons.empty() ? "" : ", ") + name + " " + std::to_string(value);
    }
    rows.push_back({"kcache nvcc", line + (reasons.empty() ? "" : " (uncached: " + reasons + ")")});
  }
  print_table(rows);
  if (s->pins_over_cap) {
    note("warning: pinned entries hold " + format_size(s->pinned_bytes) + ", all the cap (" + cap +
         ", less metadata) leaves for entries: new entries are not stored until you unpin some "
         "(`kcache unpin KEY`) or raise max_size");
  }
  return k_exit_ok;
}

void register_stats(CLI::App& app, Context& ctx, std::function<int()>& run) {
  CLI::App* sub = app.add_subcommand("stats", "Show the cache's counters (shared by every process), size and cap");
  sub->footer("Counters are kept in the cache directory and updated by every process that uses it.\n"
              "Use --json for one JSON object.");
  sub->callback([&ctx, &run] { run = [&ctx] { return run_stats(ctx); }; });
}

}  // namespace

KCACHE_COMMAND(stats, register_stats);

}  // namespace kcache::cli
