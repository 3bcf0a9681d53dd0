#include "deps/scan_memos.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "util/fd.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t k_max_memo_manifests = 4096;
constexpr std::size_t k_max_memo_facts = 200000;

std::mutex g_memo_mutex;
std::map<std::string, Facts>& facts_memo() {
  static auto* m = new std::map<std::string, Facts>();  // NOLINT: process lifetime
  return *m;
}
std::map<std::string, std::shared_ptr<const HeaderManifest>>& manifest_memo() {
  static auto* m = new std::map<std::string, std::shared_ptr<const HeaderManifest>>();  // NOLINT: process lifetime
  return *m;
}
std::map<std::string, std::string>& canonical_memo() {
  static auto* m = new std::map<std::string, std::string>();  // NOLINT: process lifetime
  return *m;
}

}  // namespace

Facts remembered_facts(const std::string& path, const FileStamp& stamp) {
  std::lock_guard lock(g_memo_mutex);
  const auto it = facts_memo().find(path);
  if (it != facts_memo().end() && it->second->stamp == stamp) {
    return it->second;
  }
  return nullptr;
}

void remember_facts(const Facts& facts) {
  std::lock_guard lock(g_memo_mutex);
  if (facts_memo().size() >= k_max_memo_facts) {
    facts_memo().clear();
  }
  facts_memo()[facts->path] = facts;
}

std::shared_ptr<const HeaderManifest> remembered_manifest(const std::string& name) {
  std::lock_guard lock(g_memo_mutex);
  if (const auto it = manifest_memo().find(name); it != manifest_memo().end()) {
    return it->second;
  }
  return nullptr;
}

void remember_manifest(const std::string& name, std::shared_ptr<const HeaderManifest> m) {
  std::lock_guard lock(g_memo_mutex);
  if (manifest_memo().size() >= k_max_memo_manifests) {
    manifest_memo().clear();
  }
  manifest_memo()[name] = std::move(m);
}

void forget_facts_and_manifests() {
  std::lock_guard lock(g_memo_mutex);
  facts_memo().clear();
  manifest_memo().clear();
}

std::string canonical_dir(const std::string& dir) {
  {
    std::lock_guard lock(g_memo_mutex);
    if (const auto it = canonical_memo().find(dir); it != canonical_memo().end()) {
      return it->second;
    }
  }
  // An existing directory: the kernel names the path it resolved (three
  // system calls where weakly_canonical() reads every component's link).
  std::string c;
  if (util::Fd fd(::open(dir.empty() ? "." : dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)); fd) {
    char buf[4096];
    const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
    const ssize_t n = ::readlink(proc.c_str(), buf, sizeof buf);
    if (n > 0 && static_cast<std::size_t>(n) < sizeof buf && buf[0] == '/') {
      c.assign(buf, static_cast<std::size_t>(n));
      if (c.ends_with(" (deleted)")) {
        c.clear();
      }
    }
  }
  if (c.empty()) {
    std::error_code ec;
    c = fs::weakly_canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec).string();
    if (ec) {
      c = dir;
    }
  }
  std::lock_guard lock(g_memo_mutex);
  canonical_memo()[dir] = c;
  return c;
}

bool under(const std::string& path, const std::string& root) {
  return !root.empty() && path.size() > root.size() && path.rfind(root, 0) == 0 && path[root.size()] == '/';
}

}  // namespace kcache::jit
