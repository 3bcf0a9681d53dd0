#include "deps/predefined_macros.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <optional>

#include "deps/user_memo.hpp"
#include "kcache/compile_request.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-predefined 1\n";
constexpr std::size_t k_max_file_bytes = 1u << 20;
constexpr std::string_view k_probe_tag = "#pragma message: \"kcache-probe ";

using Answers = std::map<std::string, PredefinedAnswer, std::less<>>;

std::mutex g_mutex;
std::atomic<std::uint64_t> g_probes{0};
std::map<std::string, Answers>& memo() {
  static auto* m = new std::map<std::string, Answers>();  // NOLINT: process lifetime
  return *m;
}

bool identifier(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
  });
}

// Options that change only diagnostics (the probe's answers are remarks in
// the log), or name inputs the scan keys itself.
bool probe_drops(std::string_view o) {
  static constexpr std::array<std::string_view, 12> k_prefixes{
      "--include-path=",  "--pre-include=",           "--define-macro=",   "--disable-warnings",
      "--diag-error=",    "--diag-suppress=",         "--diag-warn=",      "--brief-diagnostics",
      "--display-error-number", "--no-display-error-number", "--optimization-info", "--fdevice-syntax-only"};
  return std::any_of(k_prefixes.begin(), k_prefixes.end(), [&](std::string_view p) { return o.rfind(p, 0) == 0; });
}

std::optional<Answers> parse(std::string_view t) {
  if (t.substr(0, k_magic.size()) != k_magic) {
    return std::nullopt;
  }
  t.remove_prefix(k_magic.size());
  Answers out;
  std::string last;
  while (!t.empty()) {
    const auto nl = t.find('\n');
    if (nl == std::string_view::npos || nl < 3 || t[1] != ' ') {
      return std::nullopt;
    }
    std::string_view line = t.substr(2, nl - 2);
    const char kind = t[0];
    t.remove_prefix(nl + 1);
    PredefinedAnswer a;
    std::string_view name = line;
    if (kind == 'D') {
      const auto sp = line.find(' ');
      if (sp == std::string_view::npos) {
        return std::nullopt;
      }
      name = line.substr(0, sp);
      a.kind = PredefinedAnswer::Kind::object_like;
      a.value = std::string(line.substr(sp + 1));
    } else if (kind == 'F') {
      a.kind = PredefinedAnswer::Kind::other;
    } else if (kind != 'U') {
      return std::nullopt;
    }
    if (!identifier(name) || (!last.empty() && std::string_view(last) >= name)) {
      return std::nullopt;  // names are unique and sorted
    }
    last = std::string(name);
    out.emplace(last, std::move(a));
  }
  return out;
}

std::string serialize(const Answers& answers) {
  std::string out(k_magic);
  for (const auto& [name, a] : answers) {
    out += static_cast<char>(a.kind);
    out += ' ';
    out += name;
    if (a.kind == PredefinedAnswer::Kind::object_like) {
      out += ' ';
      out += a.value;
    }
    out += '\n';
  }
  return out;
}

std::optional<Answers> read_answers(const MemoPlaces& places, const std::string& name) {
  const auto bytes = read_memo_file(places, name, k_max_file_bytes);
  return bytes ? parse(*bytes) : std::nullopt;
}

// The probe program: one `#pragma message` per name, `D<expansion>` or `U`.
std::string probe_source(const std::vector<std::string>& names) {
  std::string s =
      "#define KCACHE_PROBE_STR2(...) #__VA_ARGS__\n"
      "#define KCACHE_PROBE_STR(...) KCACHE_PROBE_STR2(__VA_ARGS__)\n";
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string n = std::to_string(i);
    s += "#ifdef " + names[i] + "\n#pragma message(\"kcache-probe " + n + " D\" KCACHE_PROBE_STR(" + names[i] +
         "))\n#else\n#pragma message(\"kcache-probe " + n + " U\")\n#endif\n";
  }
  return s;
}

// Runs the probe through the context's compiler (the loaded NVRTC) and reads
// its answers from the log.
Result<Answers> probe(const PredefinedContext& context, const std::vector<std::string>& names) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "kcache-predefined-probe.cu";
  r.source = probe_source(names);
  r.target_kind = std::find(context.options.begin(), context.options.end(), "--dlink-time-opt") !=
                          context.options.end()
                      ? "ltoir"
                      : "ptx";
  if (context.compile_probe == nullptr) {
    return make_error(ErrorCode::unsupported, "no compiler to ask what NVRTC predefines in this context");
  }
  g_probes.fetch_add(1);
  auto out = context.compile_probe(r, context.options);
  if (!out) {
    return make_error(out.error().code,
                      "NVRTC's probe of its predefined macros failed: " + out.error().message, out.error().log);
  }
  std::vector<std::optional<PredefinedAnswer>> got(names.size());
  std::string_view log = *out;
  for (auto at = log.find(k_probe_tag); at != std::string_view::npos; at = log.find(k_probe_tag)) {
    log.remove_prefix(at + k_probe_tag.size());
    const auto nl = std::min(log.find('\n'), log.size());
    std::string_view line = log.substr(0, nl);
    const auto sp = line.find(' ');
    const auto close = line.rfind('"');
    if (sp == std::string_view::npos || close == std::string_view::npos || close <= sp + 1) {
      continue;
    }
    std::size_t i = 0;
    for (const char c : line.substr(0, sp)) {
      i = c >= '0' && c <= '9' ? i * 10 + static_cast<std::size_t>(c - '0') : names.size();
    }
    if (i >= names.size()) {
      continue;
    }
    const char kind = line[sp + 1];
    PredefinedAnswer a;
    if (kind == 'D') {
      a.value = std::string(line.substr(sp + 2, close - sp - 2));
      // A function-like macro is not invoked without `(`: its name comes back.
      a.kind = a.value == names[i] ? PredefinedAnswer::Kind::other : PredefinedAnswer::Kind::object_like;
    } else if (kind != 'U' || close != sp + 2) {
      continue;
    }
    got[i] = std::move(a);
  }
  Answers answers;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!got[i]) {
      return make_error(ErrorCode::corrupt, "NVRTC's probe of its predefined macros gave no answer for " + names[i],
                        *out);
    }
    answers.emplace(names[i], std::move(*got[i]));
  }
  return answers;
}

}  // namespace

PredefinedContext predefined_context(const std::string& library_identity, const std::string& fingerprint,
                                     const std::vector<std::string>& options, ProbeCompile compile_probe,
                                     fs::path memo_dir, fs::path fallback_dir) {
  PredefinedContext c;
  std::string text = "kcache-predefined-context 1\n" + library_identity + "\n" + fingerprint + "\n";
  for (const auto& o : options) {
    if (!probe_drops(o)) {
      c.options.push_back(o);
      text += std::to_string(o.size()) + ":" + o + "\n";
    }
  }
  c.id = util::sha256_hex(text);
  c.memo_dir = std::move(memo_dir);
  c.fallback_dir = std::move(fallback_dir);
  c.compile_probe = compile_probe;
  return c;
}

namespace {

std::string memo_file_name(const PredefinedContext& context) { return "predefined-" + context.id.substr(0, 32); }

// What this process and the memo files know about `names` in `context`
// (the files are read only when memory lacks some name); `ask` gets the names
// nobody knows yet. What the files add is kept in memory.
Answers known_answers(const PredefinedContext& context, const std::vector<std::string>& names,
                      std::vector<std::string>& ask) {
  auto missing = [&](const Answers& known) {
    std::vector<std::string> m;
    for (const auto& n : names) {
      if (!known.contains(n) && std::find(m.begin(), m.end(), n) == m.end()) {
        m.push_back(n);
      }
    }
    return m;
  };
  std::unique_lock lock(g_mutex);
  Answers known = memo()[context.id];
  lock.unlock();
  ask = missing(known);
  const MemoPlaces places{context.memo_dir, context.fallback_dir};
  if (!ask.empty() && !places.empty()) {
    if (auto from_disk = read_answers(places, memo_file_name(context))) {
      known.merge(*from_disk);
      ask = missing(known);
      lock.lock();
      memo()[context.id].merge(*from_disk);
    }
  }
  return known;
}

}  // namespace

std::map<std::string, PredefinedAnswer> remembered_predefined(const PredefinedContext& context,
                                                              const std::vector<std::string>& names) {
  std::vector<std::string> ask;
  const Answers known = known_answers(context, names, ask);
  std::map<std::string, PredefinedAnswer> out;
  for (const auto& n : names) {
    if (const auto it = known.find(n); it != known.end()) {
      out[n] = it->second;
    }
  }
  return out;
}

Result<std::map<std::string, PredefinedAnswer>> ask_predefined(const PredefinedContext& context,
                                                               const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (!identifier(n)) {
      return make_error(ErrorCode::unsupported, "'" + n + "' is not an identifier kcache can ask NVRTC about");
    }
  }
  const MemoPlaces places{context.memo_dir, context.fallback_dir};
  std::vector<std::string> ask;
  Answers known = known_answers(context, names, ask);
  if (!ask.empty()) {
    auto fresh = probe(context, ask);
    if (!fresh) {
      return tl::unexpected(fresh.error());
    }
    known.merge(*fresh);
    if (!places.empty()) {
      const std::string text = serialize(known);
      if (text.size() <= k_max_file_bytes) {
        (void)write_memo_file(places, memo_file_name(context), text);
      }
    }
  }
  std::map<std::string, PredefinedAnswer> out;
  for (const auto& n : names) {
    out[n] = known.at(n);
  }
  std::lock_guard lock(g_mutex);
  memo()[context.id].merge(known);
  return out;
}

std::string_view unkeyable_macro_reason(std::string_view name) {
  static constexpr std::array<std::string_view, 9> k_located{
      "__FILE__", "__LINE__", "__COUNTER__", "__DATE__", "__TIME__", "__TIMESTAMP__", "__BASE_FILE__",
      "__FILE_NAME__", "__INCLUDE_LEVEL__"};
  static constexpr std::array<std::string_view, 7> k_operators{
      "__has_include", "__has_include_next", "__has_attribute", "__has_cpp_attribute", "__has_builtin",
      "_Pragma", "__pragma"};
  if (std::find(k_located.begin(), k_located.end(), name) != k_located.end()) {
    return "its value depends on where or when NVRTC expands it";
  }
  if (std::find(k_operators.begin(), k_operators.end(), name) != k_operators.end()) {
    return "it is a preprocessor operator kcache does not evaluate";
  }
  return {};
}

bool may_be_predefined(std::string_view name) {
  static constexpr std::array<std::string_view, 8> k_unreserved{"NULL",  "va_start", "va_end", "va_arg",
                                                                "va_copy", "linux",  "unix",   "i386"};
  return name.find("__") != std::string_view::npos ||
         (name.size() > 1 && name[0] == '_' && name[1] >= 'A' && name[1] <= 'Z') ||
         std::find(k_unreserved.begin(), k_unreserved.end(), name) != k_unreserved.end();
}

std::uint64_t predefined_probe_count() noexcept { return g_probes.load(); }

void forget_predefined_answers() {
  std::lock_guard lock(g_mutex);
  memo().clear();
}

}  // namespace kcache::jit
