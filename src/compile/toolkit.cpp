#include "kcache/toolkit.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "compile/elf_file.hpp"
#include "compile/toolkit_api.hpp"
#include "deps/toolkit_memo.hpp"
#include "util/clock.hpp"
#include "util/hex.hpp"
#include "util/install_location.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace fs = std::filesystem;

std::string_view to_string(ToolkitLibrary library) noexcept {
  switch (library) {
    case ToolkitLibrary::nvrtc:
      return "nvrtc";
    case ToolkitLibrary::nvjitlink:
      return "nvjitlink";
    case ToolkitLibrary::nvvm:
      return "nvvm";
  }
  return "unknown";
}

namespace {

// Load state, shared by the loaders below and Toolkit's accessors.
std::atomic<std::uint64_t> g_loads{0};
std::atomic<std::uint64_t> g_generation{0};
std::atomic<bool> g_loaded[3] = {false, false, false};

std::vector<std::string> file_names(ToolkitLibrary library) {
  switch (library) {
    case ToolkitLibrary::nvrtc:
      return {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    case ToolkitLibrary::nvjitlink:
      return {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"};
    case ToolkitLibrary::nvvm:
      return {"libnvvm.so.4", "libnvvm.so.3", "libnvvm.so"};
  }
  return {};
}

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// KCACHE_DISABLE set to a true value (as the `disable` setting parses it).
bool disabled_by_environment() {
  std::string s = getenv_str("KCACHE_DISABLE");
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

std::vector<fs::path> home_candidates() {
  std::vector<fs::path> out;
  for (const char* var : {"KCACHE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    const auto v = getenv_str(var);
    if (!v.empty()) {
      out.emplace_back(v);
    }
  }
  out.emplace_back("/usr/local/cuda");
  return out;
}

// The homes of NVIDIA's CUDA wheels from PyPI (nvidia-cuda-nvrtc,
// nvidia-nvjitlink, nvidia-nvvm or the NVVM of nvidia-cuda-nvcc) in the Python
// environment kcache is installed in (the site-packages holding this code, or
// <prefix>/lib/python3.X/site-packages for <prefix>/bin/kcache), then in
// $VIRTUAL_ENV's. CUDA 13 wheels share nvidia/cu13/ (lib/, nvvm/lib64/); CUDA
// 12 wheels have a directory each. Listed only when the toolkit homes miss.
std::vector<fs::path> pip_wheel_homes() {
  std::vector<fs::path> sites;
  if (const fs::path self = util::this_object_path(); !self.empty()) {
    const fs::path dir = self.parent_path();  // <site>/kcache or <prefix>/bin
    sites.push_back(dir.parent_path());
    const auto more = util::python_site_dirs(dir.parent_path());
    sites.insert(sites.end(), more.begin(), more.end());
  }
  if (const auto venv = getenv_str("VIRTUAL_ENV"); !venv.empty()) {
    const auto more = util::python_site_dirs(venv);
    sites.insert(sites.end(), more.begin(), more.end());
  }
  std::vector<fs::path> out;
  for (const auto& site : sites) {
    for (const char* sub : {"nvidia/cu13", "nvidia/cuda_nvrtc", "nvidia/nvjitlink", "nvidia/cuda_nvcc"}) {
      const fs::path home = site / sub;
      if (std::find(out.begin(), out.end(), home) == out.end()) {
        out.push_back(home);
      }
    }
  }
  return out;
}

std::vector<fs::path> loader_dirs() {
  std::vector<fs::path> out;
  std::stringstream ss(getenv_str("LD_LIBRARY_PATH"));
  std::string item;
  while (std::getline(ss, item, ':')) {
    if (!item.empty()) {
      out.emplace_back(item);
    }
  }
  for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"}) {
    out.emplace_back(d);
  }
  return out;
}

bool is_plain_file(const fs::path& p, struct stat& st) { return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode); }

std::optional<std::string> read_small_file(const fs::path& p, std::size_t max_bytes) {
  return util::io::read_small_file(p.string(), max_bytes, O_NOFOLLOW);
}

// Identity of a file without a build-id: SHA-256 of its bytes.
std::optional<std::string> file_sha256(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  util::Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  const auto d = h.finish();
  return "sha256:" + util::to_hex(d.data(), d.size());
}

// Adds `p` and its stat identity (exists, device, inode, size, mtime, ctime)
// to `h`. Returns false when that identity is racy (changed within 2 s of
// `now`): a digest over it must not name a memo.
bool add_stat_identity(util::Sha256& h, const fs::path& p, std::int64_t now) {
  struct stat st {};
  const bool ok = ::stat(p.c_str(), &st) == 0;
  const std::int64_t v[] = {ok ? 1 : 0, static_cast<std::int64_t>(st.st_dev), static_cast<std::int64_t>(st.st_ino),
                            static_cast<std::int64_t>(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                            st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
  h.update(p.native());
  h.update(v, sizeof v);
  return !ok || !jit::stat_is_racy(st, now);
}

// The files the toolkit-header fingerprint covers: version.json and every
// dist-info/*/RECORD under the toolkit home, and libnvrtc-builtins.so.*
// beside libnvrtc. Listing the two directories cost more than the rest of a
// hit's toolkit check, so the lists are remembered in the toolkit memo under
// the directories' identity: adding, removing or renaming an entry changes its
// directory's mtime and ctime, and a changed directory is listed again.
using FingerprintInputs = jit::ToolkitMemo::Listing;

// The remembered lists when they still describe the directories (valid
// until `memo` changes), else `fresh`, filled now (and remembered when steady).
const FingerprintInputs& list_fingerprint_inputs(const fs::path& home, const fs::path& nvrtc_dir,
                                                 jit::ToolkitMemo& memo, std::int64_t now, FingerprintInputs& fresh) {
  util::Sha256 dirs;
  dirs.update("kcache-toolkit-listing-1");
  bool steady = add_stat_identity(dirs, home, now);
  steady = add_stat_identity(dirs, home.empty() ? fs::path() : home / "dist-info", now) && steady;
  steady = add_stat_identity(dirs, nvrtc_dir, now) && steady;
  const auto d = dirs.finish();
  const std::string digest = util::to_hex(d.data(), 16);
  if (const FingerprintInputs* remembered = memo.listing(digest)) {
    return *remembered;
  }
  FingerprintInputs& out = fresh;
  std::error_code ec;
  if (!home.empty()) {
    out.inputs.push_back(home / "version.json");
    std::vector<fs::path> records;
    for (fs::directory_iterator it(home / "dist-info", ec), end; !ec && it != end; it.increment(ec)) {
      records.push_back(it->path() / "RECORD");
    }
    std::sort(records.begin(), records.end());
    out.inputs.insert(out.inputs.end(), records.begin(), records.end());
  }
  if (!nvrtc_dir.empty()) {
    for (fs::directory_iterator it(nvrtc_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.rfind("libnvrtc-builtins.so.", 0) == 0) {
        out.builtins.push_back(it->path());
      }
    }
    std::sort(out.builtins.begin(), out.builtins.end());
  }
  if (steady) {
    memo.set_listing(digest, out);
  }
  return out;
}

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& missing) {
  void* sym = ::dlsym(handle, name);
  if (sym == nullptr) {
    missing += missing.empty() ? name : std::string(", ") + name;
    return false;
  }
  fn = reinterpret_cast<Fn>(sym);  // NOLINT: dlsym returns data pointers for functions
  return true;
}

}  // namespace

struct Toolkit::Impl {
  std::mutex mutex;
  std::set<ToolkitLibrary> discovered;
  fs::path home;
  std::map<ToolkitLibrary, fs::path> paths;
  std::map<ToolkitLibrary, struct stat> stats;  // of paths, as found
  std::map<ToolkitLibrary, std::string> build_ids;
  std::map<std::string, std::string> version_memo;  // "<lib>:<build id>" -> version
  std::optional<std::string> fingerprint;
  std::optional<fs::path> memo_dir_override;
  std::optional<fs::path> memo_file_override;
  std::optional<jit::ToolkitMemo> memo;  // the memo file as loaded, plus what this process learned
  std::string searched;

  // Finds `lib` (once per discovery): under each home candidate, then on the
  // loader's path. Only the library asked for is looked up: a hit that needs
  // NVRTC does not stat nvJitLink and libNVVM.
  void discover_locked(ToolkitLibrary lib) {
    if (searched.empty()) {
      std::string s;
      for (const auto& h : home_candidates()) {
        s += (s.empty() ? "" : ", ") + h.string();
      }
      searched = s + " (lib64, lib, nvvm/lib64), NVIDIA's CUDA wheels in kcache's Python environment and " +
                 "$VIRTUAL_ENV (site-packages/nvidia/cu13, cuda_nvrtc, nvjitlink, cuda_nvcc), then " +
                 "$LD_LIBRARY_PATH and the system library directories";
    }
    if (lib != ToolkitLibrary::nvrtc) {
      discover_locked(ToolkitLibrary::nvrtc);  // the home is NVRTC's
    }
    if (!discovered.insert(lib).second) {
      return;
    }
    const std::vector<std::string> subdirs = {"lib64", "lib", "nvvm/lib64", "targets/x86_64-linux/lib"};
    struct stat st {};
    const auto found_under = [&](const fs::path& h) {
      for (const auto& sub : subdirs) {
        for (const auto& name : file_names(lib)) {
          const auto p = h / sub / name;
          if (is_plain_file(p, st)) {
            paths[lib] = p;
            stats[lib] = st;
            if (lib == ToolkitLibrary::nvrtc) {
              home = h;
            }
            return true;
          }
        }
      }
      return false;
    };
    for (const auto& h : home_candidates()) {
      if (found_under(h)) {
        return;
      }
    }
    for (const auto& h : pip_wheel_homes()) {  // listed only once the toolkit homes have missed
      if (found_under(h)) {
        return;
      }
    }
    for (const auto& d : loader_dirs()) {
      for (const auto& name : file_names(lib)) {
        if (is_plain_file(d / name, st)) {
          paths[lib] = d / name;
          stats[lib] = st;
          return;
        }
      }
    }
  }

  fs::path memo_dir_locked() const {
    if (memo_dir_override) {
      return *memo_dir_override;
    }
    if (disabled_by_environment()) {
      return {};  // a disabled cache has nothing written under its directory
    }
    if (const auto d = getenv_str("KCACHE_DIR"); !d.empty()) {
      return fs::path(d) / "v1" / "toolkit";
    }
    if (const auto x = getenv_str("XDG_CACHE_HOME"); !x.empty()) {
      return fs::path(x) / "kcache" / "v1" / "toolkit";
    }
    if (const auto h = getenv_str("HOME"); !h.empty()) {
      return fs::path(h) / ".cache" / "kcache" / "v1" / "toolkit";
    }
    return {};
  }

  fs::path memo_file_locked() const {
    if (memo_file_override) {
      return *memo_file_override;
    }
    const fs::path dir = memo_dir_locked();
    if (dir.empty()) {
      return {};  // memos off: nothing written anywhere
    }
    if (auto user = Toolkit::user_memo_file(); !user.empty()) {
      return user;
    }
    return dir / "memo";
  }

  // Where the memo goes when the per-user file cannot be written (a HOME
  // this user may not write): the cache directory's memo directory.
  fs::path fallback_memo_file_locked() const {
    const fs::path dir = memo_dir_locked();
    return memo_file_override || dir.empty() ? fs::path() : dir / "memo";
  }

  jit::ToolkitMemo& memo_locked() {
    if (!memo) {
      memo = jit::ToolkitMemo::load(memo_file_locked());
      if (!memo->has_records()) {
        memo = jit::ToolkitMemo::load(fallback_memo_file_locked());
      }
    }
    return *memo;
  }

  void save_memo_locked() {
    if (memo && memo->changed()) {
      memo->save(memo_file_locked());
      if (memo->changed()) {
        memo->save(fallback_memo_file_locked());
      }
    }
  }
};

Toolkit& Toolkit::instance() {
  // Never destroyed: loaded libraries and their tables outlive every static.
  static Toolkit* toolkit = new Toolkit();  // NOLINT: intentional process-lifetime singleton
  return *toolkit;
}

Toolkit::Toolkit() : m_impl(std::make_unique<Impl>()) {}
Toolkit::~Toolkit() = default;

fs::path Toolkit::cuda_home() {
  std::lock_guard lock(m_impl->mutex);
  m_impl->discover_locked(ToolkitLibrary::nvrtc);
  return m_impl->home;
}

void Toolkit::set_memo_dir(fs::path dir) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->memo_dir_override = std::move(dir);
  m_impl->memo.reset();
  g_generation.fetch_add(1);
}

void Toolkit::set_memo_file(std::optional<fs::path> file) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->memo_file_override = std::move(file);
  m_impl->memo.reset();
  g_generation.fetch_add(1);
}

fs::path Toolkit::user_memo_file() {
  if (const auto x = getenv_str("XDG_CACHE_HOME"); !x.empty() && x.front() == '/') {
    return fs::path(x) / "kcache-toolkit" / "memo";
  }
  if (const auto h = getenv_str("HOME"); !h.empty() && h.front() == '/') {
    return fs::path(h) / ".cache" / "kcache-toolkit" / "memo";
  }
  return {};
}

fs::path Toolkit::memo_file() {
  std::lock_guard lock(m_impl->mutex);
  return m_impl->memo_file_locked();
}

fs::path Toolkit::memo_dir() {
  std::lock_guard lock(m_impl->mutex);
  return m_impl->memo_dir_locked();
}

std::uint64_t Toolkit::load_count() const noexcept { return g_loads.load(); }

bool Toolkit::is_loaded(ToolkitLibrary library) const noexcept {
  return g_loaded[static_cast<int>(library)].load();
}

void Toolkit::reset_discovery() {
  std::lock_guard lock(m_impl->mutex);
  m_impl->discovered.clear();
  m_impl->searched.clear();
  m_impl->home.clear();
  m_impl->paths.clear();
  m_impl->stats.clear();
  m_impl->build_ids.clear();
  m_impl->version_memo.clear();
  m_impl->fingerprint.reset();
  m_impl->memo.reset();
  g_generation.fetch_add(1);
}

std::uint64_t Toolkit::generation() const noexcept { return g_generation.load(); }

namespace {

// The version a loaded library reports, in the form that goes into keys.
Result<std::string> ask_version(ToolkitLibrary library) {
  switch (library) {
    case ToolkitLibrary::nvrtc: {
      auto api = jit::nvrtc_api();
      if (!api) {
        return tl::unexpected(api.error());
      }
      int major = 0, minor = 0;
      if ((*api)->version(&major, &minor) != 0) {
        return make_error(ErrorCode::toolkit_missing, "nvrtcVersion failed");
      }
      if (major < 12) {
        return make_error(ErrorCode::toolkit_missing,
                          "libnvrtc " + std::to_string(major) + "." + std::to_string(minor) +
                              " is too old: kcache needs NVRTC 12.0 or newer");
      }
      return std::to_string(major) + "." + std::to_string(minor);
    }
    case ToolkitLibrary::nvjitlink: {
      auto api = jit::nvjitlink_api();
      if (!api) {
        return tl::unexpected(api.error());
      }
      unsigned major = 0, minor = 0;
      if ((*api)->version(&major, &minor) != 0) {
        return make_error(ErrorCode::toolkit_missing, "nvJitLinkVersion failed");
      }
      if (major < 12) {
        return make_error(ErrorCode::toolkit_missing, "libnvJitLink is too old: kcache needs 12.0 or newer");
      }
      return std::to_string(major) + "." + std::to_string(minor);
    }
    case ToolkitLibrary::nvvm: {
      auto api = jit::nvvm_api();
      if (!api) {
        return tl::unexpected(api.error());
      }
      int major = 0, minor = 0, ir_major = 0, ir_minor = 0, dbg_major = 0, dbg_minor = 0;
      if ((*api)->version(&major, &minor) != 0 ||
          (*api)->ir_version(&ir_major, &ir_minor, &dbg_major, &dbg_minor) != 0) {
        return make_error(ErrorCode::toolkit_missing, "nvvmVersion/nvvmIRVersion failed");
      }
      if (major < 2) {
        return make_error(ErrorCode::toolkit_missing, "libnvvm is too old: kcache needs libNVVM 2.0 or newer");
      }
      return std::to_string(major) + "." + std::to_string(minor) + "/ir" + std::to_string(ir_major) + "." +
             std::to_string(ir_minor) + "/dbg" + std::to_string(dbg_major) + "." + std::to_string(dbg_minor);
    }
  }
  return make_error(ErrorCode::internal, "unknown library");
}

}  // namespace

Result<LibraryIdentity> Toolkit::identify(ToolkitLibrary library) {
  LibraryIdentity id;
  const std::string lib(to_string(library));
  std::string memo_name;
  {
    std::lock_guard lock(m_impl->mutex);
    m_impl->discover_locked(library);
    const auto it = m_impl->paths.find(library);
    if (it == m_impl->paths.end()) {
      return make_error(ErrorCode::toolkit_missing,
                        "cannot find the " + lib + " library; searched " + m_impl->searched +
                            ". Install the CUDA toolkit or set KCACHE_CUDA_HOME.");
    }
    id.path = it->second;
    auto bit = m_impl->build_ids.find(library);
    if (bit == m_impl->build_ids.end()) {
      // Remembered for this file's identity, else read from its ELF notes.
      const struct stat& st = m_impl->stats[library];
      auto& memo = m_impl->memo_locked();
      std::optional<std::string> value = memo.build_id(lib, id.path, st);
      if (!value) {
        auto bid = jit::read_build_id(id.path);
        if (!bid) {
          return make_error(ErrorCode::toolkit_missing, "cannot read " + id.path.string() + ": " +
                                                            bid.error().message);
        }
        value = *bid ? **bid : file_sha256(id.path);
        if (!value) {
          return make_error(ErrorCode::toolkit_missing, "cannot read " + id.path.string());
        }
        memo.set_build_id(lib, id.path, st, *value, util::realtime_ns());
      }
      bit = m_impl->build_ids.emplace(library, *value).first;
    }
    id.build_id = bit->second;
    memo_name = lib + ":" + id.build_id;
    if (const auto m = m_impl->version_memo.find(memo_name); m != m_impl->version_memo.end()) {
      id.version = m->second;
      id.version_from_memo = true;
      return id;
    }
    if (auto version = m_impl->memo_locked().version(lib, id.build_id)) {
      m_impl->version_memo[memo_name] = *version;
      id.version = *version;
      id.version_from_memo = true;
      m_impl->save_memo_locked();  // a build-id learned above
      return id;
    }
  }
  // Not remembered: load the library and ask it (outside the lock: loading is slow).
  auto version = ask_version(library);
  if (!version) {
    return tl::unexpected(version.error());
  }
  id.version = *version;
  std::lock_guard lock(m_impl->mutex);
  m_impl->version_memo[memo_name] = id.version;
  m_impl->memo_locked().set_version(lib, id.build_id, id.version);
  m_impl->save_memo_locked();
  return id;
}

Result<std::string> Toolkit::headers_fingerprint() {
  fs::path home;
  fs::path nvrtc_dir;
  std::lock_guard lock(m_impl->mutex);
  if (m_impl->fingerprint) {
    return *m_impl->fingerprint;
  }
  m_impl->discover_locked(ToolkitLibrary::nvrtc);
  home = m_impl->home;
  if (const auto it = m_impl->paths.find(ToolkitLibrary::nvrtc); it != m_impl->paths.end()) {
    nvrtc_dir = it->second.parent_path();
  }
  // The inputs of the fingerprint; their stat identity names its memo record
  // so a new process does not re-read them.
  auto& memo = m_impl->memo_locked();
  const std::int64_t now = util::realtime_ns();
  // (Read before the memo changes below: the lists may be the memo's own.)
  FingerprintInputs fresh;
  const auto& [inputs, builtins] = list_fingerprint_inputs(home, nvrtc_dir, memo, now, fresh);
  util::Sha256 stamp;
  bool steady = true;
  for (const auto* group : {&inputs, &builtins}) {
    for (const auto& p : *group) {
      steady = add_stat_identity(stamp, p, now) && steady;
    }
  }
  const auto sd = stamp.finish();
  const std::string stamp_digest = util::to_hex(sd.data(), 16);
  if (auto remembered = memo.fingerprint(stamp_digest)) {
    m_impl->fingerprint = *remembered;
    m_impl->save_memo_locked();  // a listing learned above
    return *remembered;
  }
  util::Sha256 h;
  auto add = [&h](std::string_view tag, std::string_view bytes) {
    const std::uint64_t n = bytes.size();
    h.update(tag);
    h.update(&n, sizeof n);
    h.update(bytes);
  };
  add("format", "kcache-toolkit-headers-1");
  for (const auto& p : inputs) {
    if (auto v = read_small_file(p, 16 << 20)) {
      add(p.filename() == "RECORD" ? p.parent_path().filename().string() : p.filename().string(), *v);
    }
  }
  for (const auto& b : builtins) {
    // The build-id names the built-in headers compiled into the library; a
    // library without one is named by its bytes.
    auto bid = jit::read_build_id(b);
    if (bid && *bid) {
      add(b.filename().string(), **bid);
    } else {
      add(b.filename().string(), file_sha256(b).value_or("unreadable"));
    }
  }
  const auto d = h.finish();
  auto fp = util::to_hex(d.data(), d.size());
  if (steady) {
    memo.set_fingerprint(stamp_digest, fp);
  }
  m_impl->save_memo_locked();
  m_impl->fingerprint = fp;
  return fp;
}

// ---- loading ------------------------------------------------------------

Result<fs::path> Toolkit::library_path(ToolkitLibrary library) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->discover_locked(library);
  const auto it = m_impl->paths.find(library);
  if (it == m_impl->paths.end()) {
    return make_error(ErrorCode::toolkit_missing,
                      std::string("cannot find the ") + std::string(to_string(library)) + " library; searched " +
                          m_impl->searched + ". Install the CUDA toolkit or set KCACHE_CUDA_HOME.");
  }
  return it->second;
}

namespace jit {

namespace {

// Opens `library` with dlopen (counted). The handle is never closed.
Result<void*> open_library(ToolkitLibrary library) {
  auto path = Toolkit::instance().library_path(library);
  if (!path) {
    return tl::unexpected(path.error());
  }
  void* handle = ::dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return make_error(ErrorCode::toolkit_missing,
                      "cannot load " + path->string() + ": " + (why != nullptr ? why : "unknown error"));
  }
  g_loads.fetch_add(1);
  g_loaded[static_cast<int>(library)].store(true);
  return handle;
}

Result<void> missing_symbols(ToolkitLibrary library, const std::string& missing) {
  if (missing.empty()) {
    return {};
  }
  return make_error(ErrorCode::toolkit_missing, "the " + std::string(to_string(library)) +
                                                    " library lacks entry points kcache needs (" + missing +
                                                    "): it is too old or not a CUDA library");
}

}  // namespace

Result<const NvrtcApi*> nvrtc_api() {
  static NvrtcApi api;
  static std::optional<Error> error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto h = open_library(ToolkitLibrary::nvrtc);
    if (!h) {
      error = h.error();
      return;
    }
    std::string m;
    resolve(*h, "nvrtcVersion", api.version, m);
    resolve(*h, "nvrtcGetErrorString", api.get_error_string, m);
    resolve(*h, "nvrtcCreateProgram", api.create_program, m);
    resolve(*h, "nvrtcDestroyProgram", api.destroy_program, m);
    resolve(*h, "nvrtcCompileProgram", api.compile_program, m);
    resolve(*h, "nvrtcGetPTXSize", api.get_ptx_size, m);
    resolve(*h, "nvrtcGetPTX", api.get_ptx, m);
    resolve(*h, "nvrtcGetCUBINSize", api.get_cubin_size, m);
    resolve(*h, "nvrtcGetCUBIN", api.get_cubin, m);
    resolve(*h, "nvrtcGetLTOIRSize", api.get_ltoir_size, m);
    resolve(*h, "nvrtcGetLTOIR", api.get_ltoir, m);
    resolve(*h, "nvrtcGetProgramLogSize", api.get_log_size, m);
    resolve(*h, "nvrtcGetProgramLog", api.get_log, m);
    resolve(*h, "nvrtcAddNameExpression", api.add_name_expression, m);
    resolve(*h, "nvrtcGetLoweredName", api.get_lowered_name, m);
    if (auto r = missing_symbols(ToolkitLibrary::nvrtc, m); !r) {
      error = r.error();
    }
  });
  if (error) {
    return tl::unexpected(*error);
  }
  return &api;
}

Result<const NvJitLinkApi*> nvjitlink_api() {
  static NvJitLinkApi api;
  static std::optional<Error> error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto h = open_library(ToolkitLibrary::nvjitlink);
    if (!h) {
      error = h.error();
      return;
    }
    std::string m;
    resolve(*h, "nvJitLinkVersion", api.version, m);
    resolve(*h, "nvJitLinkCreate", api.create, m);
    resolve(*h, "nvJitLinkDestroy", api.destroy, m);
    resolve(*h, "nvJitLinkAddData", api.add_data, m);
    resolve(*h, "nvJitLinkComplete", api.complete, m);
    resolve(*h, "nvJitLinkGetLinkedCubinSize", api.get_cubin_size, m);
    resolve(*h, "nvJitLinkGetLinkedCubin", api.get_cubin, m);
    resolve(*h, "nvJitLinkGetLinkedPtxSize", api.get_ptx_size, m);
    resolve(*h, "nvJitLinkGetLinkedPtx", api.get_ptx, m);
    resolve(*h, "nvJitLinkGetErrorLogSize", api.get_error_log_size, m);
    resolve(*h, "nvJitLinkGetErrorLog", api.get_error_log, m);
    resolve(*h, "nvJitLinkGetInfoLogSize", api.get_info_log_size, m);
    resolve(*h, "nvJitLinkGetInfoLog", api.get_info_log, m);
    if (auto r = missing_symbols(ToolkitLibrary::nvjitlink, m); !r) {
      error = r.error();
    }
  });
  if (error) {
    return tl::unexpected(*error);
  }
  return &api;
}

Result<const NvvmApi*> nvvm_api() {
  static NvvmApi api;
  static std::optional<Error> error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto h = open_library(ToolkitLibrary::nvvm);
    if (!h) {
      error = h.error();
      return;
    }
    std::string m;
    resolve(*h, "nvvmVersion", api.version, m);
    resolve(*h, "nvvmIRVersion", api.ir_version, m);
    resolve(*h, "nvvmGetErrorString", api.get_error_string, m);
    resolve(*h, "nvvmCreateProgram", api.create_program, m);
    resolve(*h, "nvvmDestroyProgram", api.destroy_program, m);
    resolve(*h, "nvvmAddModuleToProgram", api.add_module, m);
    resolve(*h, "nvvmCompileProgram", api.compile_program, m);
    resolve(*h, "nvvmGetCompiledResultSize", api.get_result_size, m);
    resolve(*h, "nvvmGetCompiledResult", api.get_result, m);
    resolve(*h, "nvvmGetProgramLogSize", api.get_log_size, m);
    resolve(*h, "nvvmGetProgramLog", api.get_log, m);
    if (auto r = missing_symbols(ToolkitLibrary::nvvm, m); !r) {
      error = r.error();
    }
  });
  if (error) {
    return tl::unexpected(*error);
  }
  return &api;
}

}  // namespace jit

}  // namespace kcache
