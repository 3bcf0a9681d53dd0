// Plan files: TOML parsing and validation (see kcache/plan.hpp, docs/plan-file.md).
#include "kcache/plan.hpp"
#include "util/input_file.hpp"
#include "kcache/host_fingerprint.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "kcache/engine_name.hpp"
#include "util/edit_distance.hpp"

namespace kcache {

namespace {

const std::vector<std::string> k_top_keys{"version", "output_dir", "hosts", "defaults", "entry"};
const std::vector<std::string> k_default_keys{"builder", "kind", "precision", "timeout_s", "labels"};
const std::vector<std::string> k_entry_keys{"name",   "builder", "kind",   "precision", "inputs", "command",
                                            "flags",  "shapes",  "options", "labels",    "timeout_s"};

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    out += (out.empty() ? "" : ", ") + w;
  }
  return out;
}

std::string suggest(std::string_view word, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& k : known) {
    const std::size_t d = util::edit_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (!best.empty()) {
    return "did you mean '" + best + "'?";
  }
  return "use one of: " + join(known);
}

// The largest numbers a plan may hold (docs/plan-file.md): a week of build
// time, and a dimension TensorRT's 32-bit shapes can hold.
constexpr std::int64_t k_max_timeout_s = 7 * 24 * 3600;
constexpr std::int64_t k_max_dimension = 2147483647;

int line_of(const toml::node& node) { return static_cast<int>(node.source().begin.line); }
int line_of(const toml::key& key) { return static_cast<int>(key.source().begin.line); }

class Validator {
 public:
  Validator(std::string file, std::filesystem::path base, const PlanLoadOptions& options)
      : m_file(std::move(file)), m_base(std::move(base)), m_options(options) {}

  void problem(int line, std::string message, std::string fix) {
    m_problems.push_back(PlanProblem{m_file, line, std::move(message), std::move(fix)});
  }
  const std::vector<PlanProblem>& problems() const { return m_problems; }

  void check_keys(const toml::table& table, const std::vector<std::string>& known, const std::string& where) {
    for (auto&& [k, v] : table) {
      (void)v;
      const std::string key(k.str());
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        problem(line_of(k), "unknown key '" + key + "' " + where, suggest(key, known));
      }
    }
  }

  std::optional<std::string> string_of(const toml::node& node, const std::string& what) {
    if (const auto* s = node.as_string()) {
      return s->get();
    }
    problem(line_of(node), what + " must be a string", "write it in quotes, e.g. " + what + " = \"...\"");
    return std::nullopt;
  }

  // A whole number from 1 to `max`; anything else (a string, 0, a number a
  // later conversion would overflow) is a problem at its line.
  std::optional<std::int64_t> positive_int(const toml::node& node, const std::string& what, std::int64_t max) {
    const auto* i = node.as_integer();
    if (i == nullptr || i->get() <= 0) {
      problem(line_of(node), what + " must be a positive integer",
              "write a whole number from 1 to " + std::to_string(max));
      return std::nullopt;
    }
    if (i->get() > max) {
      problem(line_of(node), what + " = " + std::to_string(i->get()) + " is out of range",
              "write a whole number from 1 to " + std::to_string(max));
      return std::nullopt;
    }
    return i->get();
  }

  std::vector<std::string> string_list(const toml::node& node, const std::string& what) {
    std::vector<std::string> out;
    const auto* arr = node.as_array();
    if (arr == nullptr) {
      problem(line_of(node), what + " must be a list of strings", "write " + what + " = [\"...\", \"...\"]");
      return out;
    }
    for (const auto& item : *arr) {
      if (const auto* s = item.as_string()) {
        out.push_back(s->get());
      } else {
        problem(line_of(item), what + " holds a value that is not a string", "quote every item of " + what);
      }
    }
    return out;
  }

  std::map<std::string, std::string> string_map(const toml::node& node, const std::string& what, bool scalars) {
    std::map<std::string, std::string> out;
    const auto* table = node.as_table();
    if (table == nullptr) {
      problem(line_of(node), what + " must be a table", "write " + what + " = { name = \"value\" }");
      return out;
    }
    for (auto&& [k, v] : *table) {
      const std::string key(k.str());
      if (const auto* s = v.as_string()) {
        out[key] = s->get();
      } else if (const auto* i = v.as_integer(); scalars && i != nullptr) {
        out[key] = std::to_string(i->get());
      } else if (const auto* b = v.as_boolean(); scalars && b != nullptr) {
        out[key] = b->get() ? "true" : "false";
      } else {
        problem(line_of(v), what + "." + key + " must be a " + (scalars ? "string, integer or boolean" : "string"),
                "write " + key + " = \"...\"");
      }
    }
    return out;
  }

  void check_builder(const std::string& builder, int line, const std::string& where) {
    const auto& known = m_options.builders;
    if (std::find(known.begin(), known.end(), builder) == known.end()) {
      problem(line, "unknown builder '" + builder + "' " + where, suggest(builder, known));
    }
  }

  void check_precision(const std::string& precision, int line, const std::string& where) {
    const auto& known = plan_precisions();
    if (std::find(known.begin(), known.end(), precision) == known.end()) {
      problem(line, "unknown precision '" + precision + "' " + where, suggest(precision, known));
    }
  }

  std::filesystem::path resolve(const std::string& p) const {
    std::filesystem::path path(p);
    return (path.is_absolute() ? path : m_base / path).lexically_normal();
  }

  bool check_inputs() const { return m_options.check_inputs == CheckInputs::yes; }

 private:
  std::string m_file;
  std::filesystem::path m_base;
  const PlanLoadOptions& m_options;
  std::vector<PlanProblem> m_problems;
};

struct Defaults {
  std::string builder;
  std::string kind;
  std::string precision = "fp32";
  std::chrono::seconds timeout{3600};
  std::map<std::string, std::string> labels;
};

void parse_entry(Validator& v, const toml::table& t, const Defaults& defaults, int entry_line,
                 std::vector<PlanEntry>& out, std::map<std::string, int>& names) {
  PlanEntry e;
  e.line = entry_line;
  e.builder = defaults.builder;
  e.kind = defaults.kind;
  e.precision = defaults.precision;
  e.timeout = defaults.timeout;
  e.labels = defaults.labels;
  v.check_keys(t, k_entry_keys, "in an [[entry]]");
  const std::string where_default = "at line " + std::to_string(entry_line);
  std::string where = "in the entry " + where_default;
  if (const auto* n = t.get("name")) {
    if (auto s = v.string_of(*n, "name")) {
      e.name = *s;
      where = "in entry '" + e.name + "'";
      if (auto ok = validate_model_name(e.name); !ok) {
        v.problem(line_of(*n), "entry name '" + e.name + "' cannot be a file name", ok.error().message);
      } else if (auto [it, fresh] = names.emplace(e.name, line_of(*n)); !fresh) {
        v.problem(line_of(*n), "duplicate entry name '" + e.name + "' (first at line " + std::to_string(it->second) + ")",
                  "give each entry a unique name");
      }
    }
  } else {
    v.problem(entry_line, "an [[entry]] has no name", "add name = \"my_model\"");
  }
  int builder_line = entry_line;
  if (const auto* b = t.get("builder")) {
    builder_line = line_of(*b);
    if (auto s = v.string_of(*b, "builder")) {
      e.builder = *s;
    }
  }
  if (e.builder.empty()) {
    v.problem(entry_line, "entry '" + e.name + "' names no builder", "add builder = \"command\" (or set it in [defaults])");
  } else {
    v.check_builder(e.builder, builder_line, where);
  }
  if (const auto* k = t.get("kind")) {
    if (auto s = v.string_of(*k, "kind")) {
      e.kind = *s;
      EngineName probe{"x", "na", "na", "na", "fp32", extension_for_kind(e.kind)};
      if (!probe.build()) {
        v.problem(line_of(*k), "kind '" + e.kind + "' " + where + " is not a valid artifact kind",
                  "use lowercase letters and digits: engine, cubin, fatbin, ptx, onnx, plan, blob");
      }
    }
  }
  if (const auto* p = t.get("precision")) {
    if (auto s = v.string_of(*p, "precision")) {
      e.precision = *s;
      v.check_precision(e.precision, line_of(*p), where);
    }
  }
  if (const auto* in = t.get("inputs")) {
    for (const auto& s : v.string_list(*in, "inputs")) {
      const auto path = v.resolve(s);
      std::error_code ec;
      if (v.check_inputs() && !std::filesystem::is_regular_file(path, ec)) {
        v.problem(line_of(*in), "input file '" + s + "' of entry '" + e.name + "' does not exist (looked at " +
                                    path.string() + ")",
                  "create it or fix the path; relative paths start at the plan file's directory");
      }
      e.inputs.push_back(path);
    }
  }
  if (const auto* c = t.get("command")) {
    e.command = v.string_list(*c, "command");
    if (e.command.empty() && c->is_array()) {
      v.problem(line_of(*c), "command of entry '" + e.name + "' is empty", "write command = [\"tool\", \"--arg\", ...]");
    }
  }
  if (const auto* f = t.get("flags")) {
    e.flags = v.string_list(*f, "flags");
  }
  if (const auto* s = t.get("shapes")) {
    if (const auto* table = s->as_table()) {
      for (auto&& [k, dims] : *table) {
        const std::string key(k.str());
        const auto* arr = dims.as_array();
        if (arr == nullptr || arr->empty()) {
          v.problem(line_of(dims), "shape '" + key + "' of entry '" + e.name + "' must be a non-empty list of integers",
                    "write " + key + " = [1, 3, 224, 224]");
          continue;
        }
        std::vector<std::int64_t> shape;
        for (const auto& d : *arr) {
          const auto* i = d.as_integer();
          if (i == nullptr || i->get() <= 0) {
            v.problem(line_of(d), "shape '" + key + "' of entry '" + e.name + "' has a dimension that is not a positive integer",
                      "every dimension must be an integer of at least 1");
            continue;
          }
          if (i->get() > k_max_dimension) {
            v.problem(line_of(d), "shape '" + key + "' of entry '" + e.name + "' has a dimension out of range (" +
                                      std::to_string(i->get()) + ")",
                      "every dimension must be from 1 to " + std::to_string(k_max_dimension));
            continue;
          }
          shape.push_back(i->get());
        }
        e.shapes[key] = std::move(shape);
      }
    } else {
      v.problem(line_of(*s), "shapes of entry '" + e.name + "' must be a table", "write shapes = { input = [1, 3, 224, 224] }");
    }
  }
  if (const auto* o = t.get("options")) {
    e.options = v.string_map(*o, "options", true);
  }
  if (const auto* l = t.get("labels")) {
    for (auto& [k, val] : v.string_map(*l, "labels", false)) {
      e.labels[k] = val;
    }
  }
  if (const auto* to = t.get("timeout_s")) {
    if (auto s = v.positive_int(*to, "timeout_s", k_max_timeout_s)) {
      e.timeout = std::chrono::seconds(*s);
    }
  }
  out.push_back(std::move(e));
}

}  // namespace

std::string PlanProblem::to_string() const {
  return file + ":" + std::to_string(line) + ": " + message + "; fix: " + fix;
}

const std::vector<std::string>& plan_precisions() {
  static const std::vector<std::string> k_precisions{"fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "best"};
  return k_precisions;
}

namespace {
// A plan file larger than this is not a plan (one is a few KiB).
constexpr std::uint64_t k_plan_file_max_bytes = std::uint64_t{16} << 20;
}  // namespace

Result<Plan> Plan::load(const std::filesystem::path& path, const PlanLoadOptions& options) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(path, ec).lexically_normal();
  // As every file a user names (util/input_file.hpp): a FIFO is refused, never waited on.
  auto text = util::read_input_file(absolute, "plan file", k_plan_file_max_bytes);
  if (!text) {
    Error e = text.error();
    e.message = "cannot read plan file '" + path.string() + "': " + e.message +
                "; check the path (see docs/plan-file.md for the format)";
    return tl::unexpected(std::move(e));
  }
  auto plan = parse(*text, absolute.parent_path(), path.string(), options);
  if (plan) {
    plan->file = absolute;
  }
  return plan;
}

Result<Plan> Plan::parse(std::string_view text, const std::filesystem::path& base_dir, std::string_view file_label,
                         const PlanLoadOptions& options) {
  const std::string file(file_label);
  Validator v(file, base_dir, options);
  Plan plan;
  plan.file = file;
  plan.output_dir = (base_dir / "engines").lexically_normal();
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& err) {
    const PlanProblem p{file, static_cast<int>(err.source().begin.line),
                        "not valid TOML: " + std::string(err.description()), "correct the TOML syntax at that line"};
    return make_error(ErrorCode::invalid_argument, p.to_string(), p.to_string() + "\n");
  }
  v.check_keys(root, k_top_keys, "at the top of the plan");
  if (const auto* ver = root.get("version")) {
    const auto* i = ver->as_integer();
    if (i == nullptr || i->get() != k_plan_format_version) {
      v.problem(line_of(*ver), "unsupported plan version", "write version = 1 (this kcache reads plan format 1)");
    }
  } else {
    v.problem(1, "the plan has no version", "add version = 1 at the top");
  }
  if (const auto* out = root.get("output_dir")) {
    if (auto s = v.string_of(*out, "output_dir")) {
      if (s->empty()) {
        v.problem(line_of(*out), "output_dir is empty", "name a directory, e.g. output_dir = \"engines\"");
      } else {
        plan.output_dir = v.resolve(*s);
      }
    }
  }
  if (const auto* hosts = root.get("hosts")) {
    for (std::string& spec : v.string_list(*hosts, "hosts")) {
      if (auto host = HostFingerprint::parse(spec); host) {
        plan.hosts.push_back(std::move(spec));
      } else {
        v.problem(line_of(*hosts), "host profile '" + spec + "': " + host.error().message,
                  "write each profile as field=value,... with fields sm, driver, cuda, trt, jp (e.g. \"sm=87,jp=6.2\")");
      }
    }
  }
  Defaults defaults;
  if (const auto* d = root.get("defaults")) {
    if (const auto* t = d->as_table()) {
      v.check_keys(*t, k_default_keys, "in [defaults]");
      if (const auto* b = t->get("builder")) {
        if (auto s = v.string_of(*b, "builder")) {
          defaults.builder = *s;
          v.check_builder(*s, line_of(*b), "in [defaults]");
        }
      }
      if (const auto* k = t->get("kind")) {
        if (auto s = v.string_of(*k, "kind")) {
          defaults.kind = *s;
        }
      }
      if (const auto* p = t->get("precision")) {
        if (auto s = v.string_of(*p, "precision")) {
          defaults.precision = *s;
          v.check_precision(*s, line_of(*p), "in [defaults]");
        }
      }
      if (const auto* to = t->get("timeout_s")) {
        if (auto s = v.positive_int(*to, "timeout_s", k_max_timeout_s)) {
          defaults.timeout = std::chrono::seconds(*s);
        }
      }
      if (const auto* l = t->get("labels")) {
        defaults.labels = v.string_map(*l, "labels", false);
      }
    } else {
      v.problem(line_of(*d), "defaults must be a table", "write [defaults] on its own line");
    }
  }
  std::map<std::string, int> names;
  if (const auto* entries = root.get("entry")) {
    if (const auto* arr = entries->as_array(); arr != nullptr && arr->is_array_of_tables()) {
      for (const auto& node : *arr) {
        parse_entry(v, *node.as_table(), defaults, line_of(node), plan.entries, names);
      }
    } else {
      v.problem(line_of(*entries), "entry must be an array of tables", "write each entry under its own [[entry]] header");
    }
  }
  if (!v.problems().empty()) {
    std::string log;
    for (const auto& p : v.problems()) {
      log += p.to_string() + "\n";
    }
    const std::string first = v.problems().front().to_string();
    const std::size_t n = v.problems().size();
    return make_error(ErrorCode::invalid_argument,
                      n == 1 ? first : first + " (and " + std::to_string(n - 1) + " more problem(s))", log);
  }
  return plan;
}

}  // namespace kcache
