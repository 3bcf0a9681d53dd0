#include "util/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace kcache::util::fault {

namespace {

enum class RuleAction { fail, kill, short_transfer };

struct Rule {
  bool any = false;
  Op op = Op::open;
  std::uint64_t nth = 1;
  std::uint64_t count = 1;  // 0 = unbounded
  std::uint64_t every = 1;  // hit every Kth call of the range
  RuleAction action = RuleAction::fail;
  int err = EIO;
};

constexpr std::array<std::string_view, static_cast<unsigned>(Op::count_)> k_op_names = {
    "open", "read", "write", "fsync", "rename", "unlink", "mkdir",
    "stat", "lock", "chmod", "utime", "link", "truncate"};

std::vector<Rule> g_rules;
std::array<std::atomic<std::uint64_t>, static_cast<unsigned>(Op::count_)> g_calls{};
std::atomic<std::uint64_t> g_any_calls{0};
std::atomic<std::uint64_t> g_injected{0};
std::once_flag g_env_once;

bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty()) {
    return false;
  }
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool parse_errno(std::string_view text, int& out) {
  static constexpr std::array<std::pair<std::string_view, int>, 12> k_names = {{
      {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EACCES", EACCES},
      {"EPERM", EPERM}, {"EROFS", EROFS}, {"EINTR", EINTR}, {"ENOENT", ENOENT},
      {"EEXIST", EEXIST}, {"EMFILE", EMFILE}, {"ENOMEM", ENOMEM}, {"EAGAIN", EAGAIN}}};
  for (const auto& [name, value] : k_names) {
    if (text == name) {
      out = value;
      return true;
    }
  }
  return false;
}

bool parse_rule(std::string_view text, Rule& rule) {
  bool have_op = false;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view field = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto eq = field.find('=');
    if (eq == std::string_view::npos) {
      return false;
    }
    const std::string_view name = field.substr(0, eq);
    const std::string_view value = field.substr(eq + 1);
    if (name == "op") {
      have_op = true;
      if (value == "any") {
        rule.any = true;
        continue;
      }
      bool found = false;
      for (unsigned i = 0; i < k_op_names.size(); ++i) {
        if (k_op_names[i] == value) {
          rule.op = static_cast<Op>(i);
          found = true;
        }
      }
      if (!found) {
        return false;
      }
    } else if (name == "nth") {
      if (!parse_u64(value, rule.nth) || rule.nth == 0) {
        return false;
      }
    } else if (name == "count") {
      if (!parse_u64(value, rule.count)) {
        return false;
      }
    } else if (name == "every") {
      if (!parse_u64(value, rule.every) || rule.every == 0) {
        return false;
      }
    } else if (name == "err") {
      if (!parse_errno(value, rule.err)) {
        return false;
      }
    } else if (name == "action") {
      if (value == "fail") {
        rule.action = RuleAction::fail;
      } else if (value == "kill") {
        rule.action = RuleAction::kill;
      } else if (value == "short") {
        rule.action = RuleAction::short_transfer;
      } else if (value == "eintr") {
        rule.action = RuleAction::fail;
        rule.err = EINTR;
      } else {
        return false;
      }
    } else {
      return false;
    }
  }
  return have_op;
}

bool parse_spec(std::string_view spec, std::vector<Rule>& rules) {
  rules.clear();
  while (!spec.empty()) {
    const auto semi = spec.find(';');
    const std::string_view text = spec.substr(0, semi);
    spec = semi == std::string_view::npos ? std::string_view{} : spec.substr(semi + 1);
    if (text.empty()) {
      continue;
    }
    Rule rule;
    if (!parse_rule(text, rule)) {
      rules.clear();
      return false;
    }
    rules.push_back(rule);
  }
  return !rules.empty();
}

void zero_counters() {
  for (auto& c : g_calls) {
    c.store(0, std::memory_order_relaxed);
  }
  g_any_calls.store(0, std::memory_order_relaxed);
  g_injected.store(0, std::memory_order_relaxed);
}

bool hits(const Rule& rule, std::uint64_t n) {
  if (n < rule.nth || (n - rule.nth) % rule.every != 0) {
    return false;
  }
  return rule.count == 0 || (n - rule.nth) / rule.every < rule.count;
}

}  // namespace

namespace detail {

std::atomic<bool> g_armed{false};

void init_from_env() noexcept {
  std::call_once(g_env_once, [] {
    const char* spec = std::getenv("KCACHE_FAULT");
    if (spec == nullptr || *spec == '\0') {
      return;
    }
    if (parse_spec(spec, g_rules)) {
      g_armed.store(true);
    } else {
      std::fprintf(stderr, "kcache: warning: ignoring malformed KCACHE_FAULT=\"%s\"\n", spec);
    }
  });
}

Decision check_slow(Op op) noexcept {
  const std::uint64_t n = g_calls[static_cast<unsigned>(op)].fetch_add(1) + 1;
  const std::uint64_t any_n = g_any_calls.fetch_add(1) + 1;
  for (const Rule& rule : g_rules) {
    if (!(rule.any ? hits(rule, any_n) : (rule.op == op && hits(rule, n)))) {
      continue;
    }
    g_injected.fetch_add(1);
    switch (rule.action) {
      case RuleAction::kill:
        ::kill(::getpid(), SIGKILL);
        ::_exit(137);  // not reached
      case RuleAction::short_transfer:
        if (op == Op::read || op == Op::write) {
          return {Action::short_transfer, 0};
        }
        return {Action::fail, rule.err};
      case RuleAction::fail:
        return {Action::fail, rule.err};
    }
  }
  return {};
}

}  // namespace detail

bool configure(std::string_view spec) {
  detail::init_from_env();
  zero_counters();
  detail::g_armed.store(parse_spec(spec, g_rules));
  return detail::g_armed.load();
}

void reset() {
  detail::init_from_env();
  detail::g_armed.store(false);
  g_rules.clear();
  zero_counters();
}

std::uint64_t injected() { return g_injected.load(); }

std::uint64_t calls(Op op) { return g_calls[static_cast<unsigned>(op)].load(); }

std::string_view to_string(Op op) noexcept {
  const auto i = static_cast<unsigned>(op);
  return i < k_op_names.size() ? k_op_names[i] : "unknown";
}

}  // namespace kcache::util::fault
