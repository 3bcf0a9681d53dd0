// compile/name_evidence.cpp: the program name's directory left out by evidence (compile/name_evidence.hpp).
#include "compile/name_evidence.hpp"

#include <cstdlib>

#include <fcntl.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "util/atomic_write.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_matters = "matters";
constexpr std::size_t k_max_remembered = 65536;

std::mutex g_mutex;
std::unordered_set<std::string>& remembered() {
  static auto* s = new std::unordered_set<std::string>();  // NOLINT: process lifetime
  return *s;
}

fs::path verdict_file(const std::string& hex, const fs::path& memo_dir) {
  // Beside the header manifests of the same shard, trimmed with them.
  return memo_dir.empty() || hex.size() != 64 ? fs::path() : memo_dir / hex.substr(0, 2) / ("name-dir-" + hex);
}

void remember_in_memory(const std::string& hex) {
  std::lock_guard lock(g_mutex);
  if (remembered().size() >= k_max_remembered) {
    remembered().clear();
  }
  remembered().insert(hex);
}

}  // namespace

bool left_out_by_evidence(const KeyRecord& record) {
  return std::any_of(record.fields.begin(), record.fields.end(), [](const KeyField& f) {
    return f.name == "name_directory" && f.value == k_left_out_by_evidence;
  });
}

std::string probe_name(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  // Longer than the directory by 7 (sizeof(__FILE__) differs), and another
  // character than the name's at each position the two share.
  const std::size_t length = (slash == std::string_view::npos ? 0 : slash) + 7;
  std::string probe;
  probe.reserve(length + 1 + base.size());
  for (std::size_t i = 0; i < length; ++i) {
    probe += i < name.size() && name[i] == 'k' ? 'q' : 'k';
  }
  probe += '/';
  probe += base;
  return probe;
}

bool same_log(std::string_view log, std::string_view probe_log, std::string_view name, std::string_view probe) {
  std::string swapped;
  swapped.reserve(probe_log.size());
  for (std::size_t i = 0; i < probe_log.size();) {
    if (!probe.empty() && probe_log.compare(i, probe.size(), probe) == 0) {
      swapped += name;
      i += probe.size();
    } else {
      swapped += probe_log[i++];
    }
  }
  return swapped == log;
}

bool name_directory_matters_remembered(const std::string& evidence_hex, const fs::path& memo_dir) {
  {
    std::lock_guard lock(g_mutex);
    if (remembered().contains(evidence_hex)) {
      return true;
    }
  }
  const auto file = verdict_file(evidence_hex, memo_dir);
  if (file.empty()) {
    return false;
  }
  auto text = util::io::read_small_file(file.string(), 64, O_NOFOLLOW);
  if (!text || *text != std::string(k_matters) + "\n") {
    return false;
  }
  remember_in_memory(evidence_hex);
  return true;
}

void remember_name_directory_matters(const std::string& evidence_hex, const fs::path& memo_dir) {
  remember_in_memory(evidence_hex);
  const auto file = verdict_file(evidence_hex, memo_dir);
  if (!file.empty()) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    (void)util::write_file_atomically(file, std::string(k_matters) + "\n", 0600, util::FileSync::none);
  }
}

bool in_temporary_directory(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  if (slash == std::string_view::npos) {
    return false;
  }
  const std::string_view dir = name.substr(0, slash + 1);
  const auto under = [&](std::string_view root) {
    while (root.size() > 1 && root.back() == '/') {
      root.remove_suffix(1);
    }
    return root.size() > 1 && dir.size() > root.size() && dir.substr(0, root.size()) == root && dir[root.size()] == '/';
  };
  const char* tmpdir = std::getenv("TMPDIR");
  return (tmpdir != nullptr && tmpdir[0] == '/' && under(tmpdir)) || under("/tmp") || under("/var/tmp") ||
         under("/dev/shm");
}

}  // namespace kcache::jit
