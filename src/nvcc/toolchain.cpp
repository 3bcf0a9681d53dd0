#include "nvcc/toolchain.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "nvcc/child_process.hpp"
#include "nvcc/nvcc_command.hpp"
#include "nvcc/record_text.hpp"
#include "util/atomic_write.hpp"
#include "util/clock.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::nvcc {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-nvcc-toolchain 1\n";
constexpr std::size_t k_max_records = 512;
constexpr std::size_t k_max_bytes = std::size_t{1} << 20;

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` looked up on `path_list` (colon-separated) as execvp would; empty when not found.
std::string find_on_path(const std::string& name, const std::string& path_list) {
  std::size_t start = 0;
  while (start <= path_list.size()) {
    const std::size_t end = std::min(path_list.find(':', start), path_list.size());
    const std::string dir = end > start ? path_list.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) {
      return candidate;
    }
    start = end + 1;
  }
  return {};
}

std::string first_line(std::string_view text) {
  const std::size_t nl = text.find('\n');
  std::string line(text.substr(0, nl));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
    line.pop_back();
  }
  return line;
}

std::string trim(std::string_view s) {
  std::size_t a = 0;
  std::size_t b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r' || s[a] == '\n')) {
    ++a;
  }
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n')) {
    --b;
  }
  return std::string(s.substr(a, b - a));
}

// The include directories of an nvcc --dryrun line such as
// `#$ SYSTEM_INCLUDES="-isystem" "/cuda/include/cccl"`.
void add_dryrun_includes(std::string_view value, std::vector<std::string>& out) {
  std::vector<std::string> words;
  std::string cur;
  bool quoted = false;
  bool in_word = false;
  for (const char c : value) {
    if (c == '"') {
      quoted = !quoted;
      in_word = true;
      continue;
    }
    if (!quoted && (c == ' ' || c == '\t')) {
      if (in_word) {
        words.push_back(std::move(cur));
        cur.clear();
        in_word = false;
      }
      continue;
    }
    in_word = true;
    cur += c;
  }
  if (in_word) {
    words.push_back(std::move(cur));
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if ((w == "-I" || w == "-isystem") && i + 1 < words.size()) {
      out.push_back(words[++i]);
    } else if (w.rfind("-isystem", 0) == 0 && w.size() > 8) {
      out.push_back(w.substr(8));
    } else if (w.rfind("-I", 0) == 0 && w.size() > 2) {
      out.push_back(w.substr(2));
    }
  }
}

}  // namespace

Toolchain::Toolchain(std::filesystem::path memo_file) : m_file(std::move(memo_file)), m_now_ns(util::realtime_ns()) {}

Toolchain::~Toolchain() = default;

const std::vector<std::string>& Toolchain::tool_files() {
  static const std::vector<std::string> k_files = {
      "bin/nvcc",      "bin/nvcc.profile", "bin/cudafe++",          "bin/ptxas", "bin/fatbinary",
      "bin/nvlink",    "bin/bin2c",        "nvvm/bin/cicc",         "nvvm/libdevice/libdevice.10.bc",
  };
  return k_files;
}

void Toolchain::load() {
  if (m_loaded) {
    return;
  }
  m_loaded = true;
  if (m_file.empty()) {
    return;
  }
  auto text = util::io::read_small_file(m_file.string(), k_max_bytes, O_NOFOLLOW);
  if (!text || text->compare(0, k_magic.size(), k_magic) != 0) {
    return;
  }
  RecordReader r(std::string_view(*text).substr(k_magic.size()));
  std::vector<Record> records;
  for (;;) {
    if (r.tag_is("end")) {
      if (!r.end() || !r.at_end()) {
        return;
      }
      break;
    }
    Record rec;
    if (r.tag_is("file")) {
      const auto path = r.str();
      const auto dev = r.num();
      const auto ino = r.num();
      const auto size = r.num();
      const auto mtime = r.num();
      const auto ctime = r.num();
      const auto sha = r.str();
      if (!path || !dev || !ino || !size || !mtime || !ctime || !sha || sha->size() != 64 || !r.end()) {
        return;
      }
      rec.kind = "file";
      rec.key = std::string(*path);
      rec.stamp = FileStamp{*dev, *ino, *size, static_cast<std::int64_t>(*mtime), static_cast<std::int64_t>(*ctime)};
      rec.value = std::string(*sha);
    } else if (r.tag_is("ask")) {
      const auto question = r.str();
      const auto answer = r.str();
      if (!question || !answer || !r.end()) {
        return;
      }
      rec.kind = "ask";
      rec.key = std::string(*question);
      rec.value = std::string(*answer);
    } else {
      return;
    }
    if (records.size() >= k_max_records) {
      return;
    }
    records.push_back(std::move(rec));
  }
  m_records = std::move(records);
}

const Toolchain::Record* Toolchain::find(const std::string& kind, const std::string& key) const {
  for (const auto& r : m_records) {
    if (r.kind == kind && r.key == key) {
      return &r;
    }
  }
  return nullptr;
}

void Toolchain::remember(Record record) {
  std::erase_if(m_records, [&](const Record& r) { return r.kind == record.kind && r.key == record.key; });
  m_records.insert(m_records.begin(), std::move(record));
  if (m_records.size() > k_max_records) {
    m_records.resize(k_max_records);
  }
  m_changed = true;
}

std::optional<std::string> Toolchain::digest(const std::string& path) {
  load();
  const auto stamp = stamp_of(path);
  if (!stamp) {
    return std::nullopt;
  }
  if (const Record* r = find("file", path); r != nullptr && r->stamp == *stamp) {
    return r->value;
  }
  FileStamp read_stamp;
  auto sha = sha256_of_file(path, &read_stamp);
  if (!sha) {
    return std::nullopt;
  }
  const auto after = stamp_of(path);
  if (after && *after == read_stamp && read_stamp == *stamp && !stamp->is_racy(m_now_ns)) {
    remember(Record{"file", path, *stamp, *sha});
  }
  return sha;
}

std::optional<std::string> Toolchain::ask(const std::string& question, const fs::path& program,
                                          const std::vector<std::string>& argv, bool want_stderr) {
  load();
  if (const Record* r = find("ask", question); r != nullptr) {
    return r->value;
  }
  auto ran = run_captured(program, argv, std::size_t{1} << 20);
  if (!ran || ran->status() != 0 || ran->truncated) {
    return std::nullopt;
  }
  std::string answer = want_stderr ? ran->err : ran->out;
  remember(Record{"ask", question, {}, answer});
  return answer;
}

Result<NvccIdentity> Toolchain::nvcc(const fs::path& nvcc_path) {
  NvccIdentity id;
  id.nvcc = nvcc_path;
  id.root = nvcc_path.parent_path().parent_path();
  util::Sha256 tools;
  for (const auto& rel : tool_files()) {
    const std::string path = (id.root / rel).string();
    // nvcc itself is the program given (it may be a copy or a link outside the toolkit).
    const std::string read = rel == "bin/nvcc" ? nvcc_path.string() : path;
    auto d = digest(read);
    if (!d) {
      if (rel == "bin/nvcc") {
        return make_error(ErrorCode::not_found, "cannot read nvcc at " + read);
      }
      d = std::string("missing");
    }
    tools.update(rel);
    tools.update("\n", 1);
    tools.update(*d);
    tools.update("\n", 1);
  }
  const auto sum = tools.finish();
  id.tools_sha256 = util::to_hex(sum.data(), sum.size());
  auto version = ask("nvcc-version " + id.tools_sha256, nvcc_path, {nvcc_path.string(), "--version"}, false);
  if (!version) {
    return make_error(ErrorCode::toolkit_missing, "`" + nvcc_path.string() + " --version` failed");
  }
  // "Cuda compilation tools, release 13.0, V13.0.88" and "Build cuda_13.0.r13.0/compiler.36424714_0".
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < version->size()) {
    const std::size_t nl = version->find('\n', start);
    std::string line = trim(std::string_view(*version).substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (!line.empty()) {
      lines.push_back(std::move(line));
    }
    if (nl == std::string::npos) {
      break;
    }
    start = nl + 1;
  }
  id.version = lines.size() >= 2 ? lines[lines.size() - 2] + "; " + lines.back() : (lines.empty() ? "" : lines.back());
  if (auto profile = util::io::read_small_file((id.root / "bin" / "nvcc.profile").string(), 1 << 16)) {
    id.profile_environment = profile_appended_variables(*profile);
  }
  return id;
}

Result<HostCompiler> Toolchain::host_compiler(const NvccCommand& command, const NvccIdentity& nvcc) {
  std::string name = command.ccbin.empty() ? "gcc" : command.ccbin;
  std::string path;
  if (name.find('/') != std::string::npos) {
    struct stat st {};
    path = ::stat(name.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? name + "/gcc" : name;
  } else {
    // nvcc.profile puts <cuda>/nvvm/bin and <cuda>/bin before $PATH.
    const char* env_path = std::getenv("PATH");
    const std::string list = (nvcc.root / "nvvm" / "bin").string() + ":" + (nvcc.root / "bin").string() + ":" +
                             (env_path != nullptr ? env_path : "");
    path = find_on_path(name, list);
    if (path.empty()) {
      return make_error(ErrorCode::not_found, "the host compiler '" + name + "' is not on PATH");
    }
  }
  HostCompiler host;
  host.path = path;
  auto driver = digest(path);
  if (!driver) {
    return make_error(ErrorCode::not_found, "cannot read the host compiler " + path);
  }
  host.driver_sha256 = *driver;
  const std::string q = " " + host.driver_sha256 + " " + path;
  auto version = ask("host-version" + q, path, {path, "--version"}, false);
  auto machine = ask("host-machine" + q, path, {path, "-dumpmachine"}, false);
  if (!version || !machine) {
    return make_error(ErrorCode::not_found, "`" + path + " --version` or `-dumpmachine` failed");
  }
  host.version = first_line(*version);
  host.machine = first_line(*machine);
  // The programs the driver runs: asked of it, then looked up as it would.
  if (auto cc1plus = ask("host-cc1plus" + q, path, {path, "-print-prog-name=cc1plus"}, false)) {
    const std::string p = first_line(*cc1plus);
    if (p.find('/') != std::string::npos) {
      if (auto d = digest(p)) {
        host.cc1plus_sha256 = *d;
      }
    }
  }
  if (auto as = ask("host-as" + q, path, {path, "-print-prog-name=as"}, false)) {
    std::string p = first_line(*as);
    if (p.find('/') == std::string::npos) {
      const char* env_path = std::getenv("PATH");
      p = find_on_path(p, env_path != nullptr ? env_path : "");
    }
    if (!p.empty()) {
      if (auto d = digest(p)) {
        host.as_sha256 = *d;
      }
    }
  }
  return host;
}

Result<SearchDirs> Toolchain::search_dirs(const NvccIdentity& nvcc, const HostCompiler& host,
                                          const std::vector<std::string>& host_options) {
  SearchDirs dirs;
  // nvcc's own: the INCLUDES and SYSTEM_INCLUDES of a dry run, which read the
  // profile and the environment variables it adds to.
  std::string env_part;
  for (const auto& v : nvcc.profile_environment) {
    if (const char* value = std::getenv(v.c_str())) {
      env_part += v + "=" + value + "\n";
    }
  }
  auto dry = ask("nvcc-includes " + nvcc.tools_sha256 + " " + util::sha256_hex(env_part), nvcc.nvcc,
                 {nvcc.nvcc.string(), "--dryrun", "-c", "kcache-probe.cu", "-o", "kcache-probe.o"}, true);
  if (!dry) {
    return make_error(ErrorCode::toolkit_missing, "`nvcc --dryrun` failed");
  }
  std::size_t start = 0;
  while (start < dry->size()) {
    const std::size_t nl = std::min(dry->find('\n', start), dry->size());
    const std::string_view line = std::string_view(*dry).substr(start, nl - start);
    for (const std::string_view prefix : {std::string_view("#$ INCLUDES="), std::string_view("#$ SYSTEM_INCLUDES=")}) {
      if (line.substr(0, prefix.size()) == prefix) {
        add_dryrun_includes(line.substr(prefix.size()), dirs.toolkit);
      }
    }
    start = nl + 1;
  }
  // The host compiler's defaults, with the options that change them.
  std::vector<std::string> argv{host.path, "-xc++", "-E", "-v", "-"};
  std::string flags;
  for (std::size_t i = 0; i < host_options.size(); ++i) {
    const std::string& o = host_options[i];
    const bool search = o.rfind("-I", 0) == 0 || o.rfind("-i", 0) == 0 || o.rfind("-nostdinc", 0) == 0 ||
                        o.rfind("--sysroot", 0) == 0 || o.rfind("-stdlib", 0) == 0;
    if (!search) {
      continue;
    }
    argv.push_back(o);
    flags += " " + o;
    const bool takes_next = o == "-I" || o == "-isystem" || o == "-iquote" || o == "-idirafter" || o == "-isysroot" ||
                            o == "-iprefix" || o == "-iwithprefix" || o == "-iwithprefixbefore" || o == "--sysroot";
    if (takes_next && i + 1 < host_options.size()) {
      argv.push_back(host_options[++i]);
      flags += " " + host_options[i];
    }
  }
  auto verbose = ask("host-search " + host.driver_sha256 + " " + host.path + flags, host.path, argv, true);
  if (!verbose) {
    return make_error(ErrorCode::not_found, "`" + host.path + " -xc++ -E -v -` failed");
  }
  dirs.host = parse_search_list(*verbose);
  return dirs;
}

void Toolchain::save() {
  if (!m_changed || m_file.empty()) {
    return;
  }
  // Merge: records another process added since load() are kept behind ours.
  std::vector<Record> mine = std::move(m_records);
  m_records.clear();
  m_loaded = false;
  load();
  std::vector<Record> theirs = std::move(m_records);
  m_records = std::move(mine);
  for (auto& r : theirs) {
    if (m_records.size() >= k_max_records) {
      break;
    }
    if (find(r.kind, r.key) == nullptr) {
      m_records.push_back(std::move(r));
    }
  }
  RecordWriter w;
  w.raw(k_magic);
  for (const auto& r : m_records) {
    if (r.kind == "file") {
      w.tag("file").str(r.key).num(r.stamp.dev).num(r.stamp.ino).num(r.stamp.size);
      w.num(static_cast<std::uint64_t>(r.stamp.mtime_ns)).num(static_cast<std::uint64_t>(r.stamp.ctime_ns));
      w.str(r.value).end();
    } else {
      w.tag("ask").str(r.key).str(r.value).end();
    }
  }
  w.tag("end").end();
  std::error_code ec;
  fs::create_directories(m_file.parent_path(), ec);
  (void)util::write_file_atomically(m_file, w.text(), 0600, util::FileSync::none);
  m_changed = false;
}

std::vector<std::string> profile_appended_variables(std::string_view profile) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start < profile.size()) {
    const std::size_t nl = std::min(profile.find('\n', start), profile.size());
    const std::string_view line = profile.substr(start, nl - start);
    start = nl + 1;
    std::size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) != 0 || line[i] == '_')) {
      ++i;
    }
    if (i == 0) {
      continue;
    }
    const std::string name(line.substr(0, i));
    std::string_view rest = line.substr(i);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) {
      rest.remove_prefix(1);
    }
    if (rest.substr(0, 2) == "+=" || rest.substr(0, 2) == "=+") {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> parse_search_list(std::string_view text) {
  std::vector<std::string> dirs;
  bool in_list = false;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.find("search starts here:") != std::string_view::npos) {
      in_list = true;
      continue;
    }
    if (line.rfind("End of search list.", 0) == 0) {
      in_list = false;
      continue;
    }
    if (in_list && !line.empty() && line.front() == ' ') {
      std::string dir = trim(line);
      // gcc marks framework directories (macOS) with a suffix; none on Linux.
      if (const auto f = dir.find(" (framework directory)"); f != std::string::npos) {
        dir.resize(f);
      }
      if (!dir.empty()) {
        dirs.push_back(std::move(dir));
      }
    }
  }
  return dirs;
}

}  // namespace kcache::nvcc
