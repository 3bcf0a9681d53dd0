// Plan build reports: summary, JSON and the human table (see kcache/plan_report.hpp).
#include "kcache/plan_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kcache {

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::built:
      return "BUILT";
    case Outcome::reused:
      return "REUSED";
    case Outcome::fetched:
      return "FETCHED";
    case Outcome::failed:
      return "FAILED";
    case Outcome::not_started:
      return "NOT_STARTED";
  }
  return "UNKNOWN";
}

void PlanReport::summarise() {
  const double seconds = summary.seconds;
  summary = PlanSummary{};
  summary.seconds = seconds;
  summary.entries = entries.size();
  for (const auto& e : entries) {
    switch (e.outcome) {
      case Outcome::built:
        ++summary.built;
        break;
      case Outcome::reused:
        ++summary.reused;
        break;
      case Outcome::fetched:
        ++summary.fetched;
        break;
      case Outcome::failed:
        ++summary.failed;
        break;
      case Outcome::not_started:
        ++summary.not_started;
        break;
    }
    summary.saved_seconds += e.saved_seconds;
  }
  const auto hits = summary.reused + summary.fetched;
  const auto ran = hits + summary.built + summary.failed;
  summary.hit_ratio = ran == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(ran);
}

std::string PlanReport::to_json() const {
  nlohmann::ordered_json doc;
  doc["format"] = 1;
  doc["plan"] = plan;
  doc["host"] = host;
  doc["ok"] = ok();
  doc["entries"] = nlohmann::ordered_json::array();
  for (const auto& e : entries) {
    nlohmann::ordered_json j;
    j["name"] = e.name;
    j["path"] = e.path;
    j["sidecar"] = e.sidecar;
    j["outcome"] = std::string(to_string(e.outcome));
    j["key"] = e.key;
    j["sha256"] = e.sha256;
    j["size"] = e.size;
    j["build_seconds"] = e.build_seconds ? nlohmann::ordered_json(*e.build_seconds) : nlohmann::ordered_json(nullptr);
    j["saved_seconds"] = e.saved_seconds;
    j["reason"] = e.reason;
    j["error"] = e.error;
    doc["entries"].push_back(std::move(j));
  }
  nlohmann::ordered_json s;
  s["entries"] = summary.entries;
  s["built"] = summary.built;
  s["reused"] = summary.reused;
  s["fetched"] = summary.fetched;
  s["failed"] = summary.failed;
  s["not_started"] = summary.not_started;
  s["hit_ratio"] = summary.hit_ratio;
  s["seconds"] = summary.seconds;
  s["saved_seconds"] = summary.saved_seconds;
  doc["summary"] = std::move(s);
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string PlanReport::to_table() const {
  std::size_t name_w = 5;
  std::size_t file_w = 4;
  for (const auto& e : entries) {
    name_w = std::max(name_w, e.name.size());
    const auto slash = e.path.rfind('/');
    file_w = std::max(file_w, e.path.size() - (slash == std::string::npos ? 0 : slash + 1));
  }
  std::string out = fmt::format("{:<{}}  {:<11}  {:>10}  {:>9}  {:<{}}  {}\n", "ENTRY", name_w, "OUTCOME", "SIZE",
                                "SECONDS", "FILE", file_w, "SHA-256");
  for (const auto& e : entries) {
    const auto slash = e.path.rfind('/');
    const std::string file = e.path.substr(slash == std::string::npos ? 0 : slash + 1);
    const std::string secs = e.build_seconds ? fmt::format("{:.3f}", *e.build_seconds) : std::string("-");
    out += fmt::format("{:<{}}  {:<11}  {:>10}  {:>9}  {:<{}}  {}\n", e.name, name_w, to_string(e.outcome),
                       e.outcome == Outcome::failed || e.outcome == Outcome::not_started ? std::string("-")
                                                                                          : std::to_string(e.size),
                       secs, file, file_w, e.sha256.empty() ? std::string("-") : e.sha256.substr(0, 16));
    if (!e.error.empty()) {
      out += "  error: " + e.error + "\n";
    }
  }
  out += fmt::format("{} entries: {} built, {} reused, {} fetched, {} failed, {} not started; hit ratio {:.0f}%; "
                     "{:.3f} s spent, {:.3f} s saved\n",
                     summary.entries, summary.built, summary.reused, summary.fetched, summary.failed,
                     summary.not_started, summary.hit_ratio * 100.0, summary.seconds, summary.saved_seconds);
  return out;
}

}  // namespace kcache
