#include "deps/closure_scan.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "deps/computed_includes.hpp"
#include "deps/directory_listings.hpp"
#include "deps/macro_expander.hpp"
#include "deps/name_directory.hpp"
#include "deps/scan_directories.hpp"
#include "deps/scan_memos.hpp"
#include "deps/toolkit_includes.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"
#include "util/sha256.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

// Reads `path` (a regular file that exists) and fills `entry`; `bytes` is
// the caller's buffer, reused for every header of a scan.
Result<void> load(const std::string& path, ManifestHeader& entry, std::string& bytes) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    // O_NONBLOCK: a FIFO swapped in since the header was found never blocks the scan.
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) {
      return make_errno_error(errno, "open header " + path);
    }
    struct stat before {};
    if (::fstat(fd.get(), &before) != 0) {
      return make_errno_error(errno, "stat header " + path);
    }
    if (!S_ISREG(before.st_mode)) {
      return make_error(ErrorCode::io, "header " + path + " is not a regular file");
    }
    bytes.resize(static_cast<std::size_t>(before.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) {
        continue;
      }
      if (r < 0) {
        return make_errno_error(errno, "read header " + path);
      }
      if (r == 0) {
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    struct stat after {};
    if (::fstat(fd.get(), &after) != 0) {
      return make_errno_error(errno, "stat header " + path);
    }
    if (got != bytes.size() || !(stamp_of(before) == stamp_of(after))) {
      continue;  // changed while being read: read again
    }
    entry.path = path;
    entry.stamp = stamp_of(after);
    entry.sha256 = util::sha256_hex(bytes);
    entry.directives = scan_file(bytes);
    return {};
  }
  return make_error(ErrorCode::io, "header " + path + " keeps changing while kcache reads it");
}

std::string join(const std::string& dir, const std::string& name) {
  if (!name.empty() && name.front() == '/') {
    return name;
  }
  if (dir.empty() || dir == ".") {
    return name;
  }
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// One full scan: finds the closure and records what it depends on.
class ClosureScan {
public:
  ClosureScan(const ScanInput& in, const HeaderManifest* previous, bool with_predefined)
      : m_in(in), m_toolkit_root(in.toolkit_root.string()), m_now(util::realtime_ns()), m_directories(listings_dir(in), m_now),
        m_computed(
            in, with_predefined, m_table, m_table_version, m_manifest.not_cacheable,
            [this](std::vector<IncludeDirective> names, const DirList& includer_dirs, const std::string& where) {
              m_work.push_back({std::move(names), includer_dirs, where});
            },
            [this](const std::vector<MacroDefinition>& defines) { add_defines(defines); }) {
    if (previous != nullptr && previous->has_details) {
      for (const auto& h : previous->headers) {
        m_previous[h.path] = &h;
      }
    }
    for (const auto& d : in.include_dirs) {
      if (!m_toolkit_root.empty()) {
        const auto c = canonical_dir(d);
        if (c == m_toolkit_root || under(c, m_toolkit_root)) {
          m_dirs_in_toolkit.insert(d);
        }
      }
    }
    for (const auto& d : in.defines) {
      m_table.add_command_line(d);
    }
    m_include_ids = dir_ids(in.include_dirs);
  }

  // Runs the scan; `m_manifest` then holds the result and its dependencies.
  Result<void> run() {
    m_manifest.input.clear();
    m_main_dirs.push_back(dir_of(m_in.program_name));
    if (!m_in.source_path.empty() && dir_of(m_in.source_path) != m_main_dirs.front()) {
      m_main_dirs.push_back(dir_of(m_in.source_path));
    }
    // Include directories are recorded too: one that is a symlink moved into
    // or out of the toolkit is then another directory.
    for (const auto& d : m_in.include_dirs) {
      m_directories.note_dir_or_ancestor(d);
    }
    {
      FileDirectives f = scan_file(m_in.source);
      m_name_dir.add_source(f);
      if (!m_in.pre_includes.empty()) {
        m_name_dir.add_reason("--pre-include=" + m_in.pre_includes.front() + " may be resolved against it");
      }
      for (const auto& p : m_in.pre_includes) {
        f.includes.push_back({p, false, false});
      }
      add_defines(f.defines);
      if (!f.includes.empty()) {
        read_toolkit_ahead();
      }
      m_work.push_back({std::move(f.includes), dir_ids(m_main_dirs), m_in.program_name});
    }
    // Every in-memory header is scanned, reached or not: NVRTC gives it to
    // toolkit headers too, which are not scanned (its content is in the key anyway).
    if (m_in.memory_headers != nullptr) {
      for (const auto& h : *m_in.memory_headers) {
        if (m_memory_done.insert(h.name).second) {
          FileDirectives f = scan_file(h.bytes);
          m_name_dir.add_memory_header(h.name, f);
          add_defines(f.defines);
          auto dirs = dir_ids(m_main_dirs);
          dirs.push_back(dir_id(dir_of(h.name)));
          m_work.push_back({std::move(f.includes), std::move(dirs), "in-memory header " + h.name});
        }
      }
    }
    for (int round = 0; round < 1000; ++round) {
      while (!m_work.empty()) {
        Work w = std::move(m_work.front());
        m_work.pop_front();
        for (const auto& d : w.directives) {
          if (auto r = resolve(d, w.includer_dirs, w.where); !r) {
            return r;
          }
        }
      }
      if (auto r = check_shadows(); !r) {
        return r;
      }
      const auto version = m_table_version;
      if (m_work.empty()) {
        expand_computed();
      }
      // Predefined macros added by expand_computed() expand everything again.
      if (!m_manifest.not_cacheable.empty()) {
        break;
      }
      if (m_work.empty() && m_tk_pending.empty() && version == m_table_version) {
        // A fixed point with identifiers taken as undefined that nobody has
        // asked NVRTC about yet: one probe for all of them (not one per round).
        // Their answers can only add definitions: expand again if they did.
        if (!m_computed.has_pending() || !m_computed.ask_pending() || version == m_table_version) {
          break;
        }
      }
    }
    if (m_computed.has_pending() && m_manifest.not_cacheable.empty()) {
      // Never a result with identifiers taken as undefined unasked.
      m_manifest.not_cacheable = m_computed.stopped_before_asking();
    }
    m_manifest.headers.reserve(m_found.size());
    for (const auto& [path, h] : m_found) {
      m_manifest.headers.push_back(*h);
      m_name_dir.add_header(path, h->directives);
    }
    if (m_reached_toolkit) {
      m_name_dir.add_doubt("toolkit headers are reached, which are not scanned");
    }
    m_manifest.name_directory_seen = m_name_dir.because();
    m_manifest.name_directory_doubt = m_name_dir.because().empty() ? m_name_dir.doubt() : std::string();
    m_manifest.file_macros = m_name_dir.file_macros();
    m_manifest.dirs = m_directories.records();
    m_manifest.looked_up.assign(m_computed.looked_up().begin(), m_computed.looked_up().end());
    return {};
  }

  HeaderManifest& manifest() { return m_manifest; }

private:
  // Directories and include names are numbered once per scan: a candidate
  // is a (directory, name) pair, and the same pairs come up from many headers.
  using DirList = std::vector<std::uint32_t>;

  std::uint32_t id_of(std::unordered_map<std::string, std::uint32_t>& ids, std::vector<std::string>* names,
                      const std::string& s) {
    const auto [it, fresh] = ids.try_emplace(s, static_cast<std::uint32_t>(ids.size()));
    if (fresh && names != nullptr) {
      names->push_back(s);
    }
    return it->second;
  }
  std::uint32_t dir_id(const std::string& dir) { return id_of(m_dir_ids, &m_dir_names, dir); }
  DirList dir_ids(const std::vector<std::string>& dirs) {
    DirList out;
    for (const auto& d : dirs) {
      out.push_back(dir_id(d));
    }
    return out;
  }
  // Whether (directory, name) is tried for the first time in this scan. An
  // open-addressing set: hundreds of thousands of pairs, no node each.
  bool first_try(std::uint32_t dir, std::uint32_t name) {
    if (2 * (m_tried_count + 1) > m_tried.size()) {
      std::vector<std::uint64_t> old(std::max<std::size_t>(1024, 2 * m_tried.size()), 0);
      old.swap(m_tried);
      m_tried_count = 0;
      for (const auto k : old) {
        if (k != 0) {
          insert_tried(k);
        }
      }
    }
    return insert_tried((static_cast<std::uint64_t>(dir) << 32 | name) + 1);  // 0 marks a free slot
  }
  bool insert_tried(std::uint64_t key) {
    const std::size_t mask = m_tried.size() - 1;
    for (std::size_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; i = (i + 1) & mask) {
      if (m_tried[i] == key) {
        return false;
      }
      if (m_tried[i] == 0) {
        m_tried[i] = key;
        ++m_tried_count;
        return true;
      }
    }
  }

  struct Work {
    std::vector<IncludeDirective> directives;
    DirList includer_dirs;
    std::string where;
  };

  void add_defines(const std::vector<MacroDefinition>& defines) {
    for (const auto& d : defines) {
      if (m_table.add(d)) {
        ++m_table_version;
      }
    }
  }

  // A stamp too recent to trust is kept as zero, which never matches.
  FileStamp trusted(const FileStamp& s) const { return is_racy(s, m_now) ? FileStamp{} : s; }

  bool in_toolkit_dir(const std::string& path) {
    if (m_toolkit_root.empty()) {
      return false;
    }
    const auto cdir = canonical_dir(dir_of(path));
    return cdir == m_toolkit_root || under(cdir, m_toolkit_root);
  }

  Result<void> resolve(const IncludeDirective& d, const DirList& includer_dirs, const std::string& where) {
    if (d.computed) {
      m_computed.note(d.name, includer_dirs, where);
      return {};
    }
    // In-memory headers win over files (NVRTC looks them up by exact name);
    // every one of them is scanned already.
    if (m_in.memory_headers != nullptr) {
      for (const auto& h : *m_in.memory_headers) {
        if (h.name == d.name) {
          return {};
        }
      }
    }
    if (!d.name.empty() && d.name.front() == '/') {
      return consider(d.name, includer_dirs);
    }
    const std::uint32_t name = name_id(d.name);
    for (const auto dir : includer_dirs) {
      if (!first_try(dir, name) || absent_at_first(dir, name)) {
        continue;
      }
      if (auto r = consider_in(m_dir_names[dir], d.name, includer_dirs); !r) {
        return r;
      }
    }
    for (std::size_t i = 0; i < m_in.include_dirs.size(); ++i) {
      const std::string& dir = m_in.include_dirs[i];
      if (!first_try(m_include_ids[i], name)) {
        continue;
      }
      if (m_dirs_in_toolkit.contains(dir)) {
        // Covered by the toolkit fingerprint; what it includes in turn is
        // followed inside the toolkit (check_shadows).
        m_tk_pending.push_back(
            fs::path(canonical_dir(dir) + "/" + d.name).lexically_normal().string());
        continue;
      }
      if (absent_at_first(m_include_ids[i], name)) {
        continue;
      }
      if (auto r = consider_in(dir, d.name, includer_dirs); !r) {
        return r;
      }
    }
    return {};
  }

  // An include name's id, and what its first component is.
  std::uint32_t name_id(const std::string& name) {
    const std::uint32_t id = id_of(m_name_ids, nullptr, name);
    if (id == m_name_first.size()) {
      const std::string first = name.substr(0, name.find('/'));
      const bool usable = !first.empty() && first != "." && first != "..";
      m_name_first.push_back(usable ? id_of(m_first_ids, &m_first_names, first) : k_no_first);
    }
    return id;
  }

  // The fast path of absent_by_listing() for the candidate (directory `dir`,
  // name `name`): whether the directory's listing lacks the name's first
  // component. Records it as absent_by_listing() does, once per directory and
  // component, without building the candidate's path.
  bool absent_at_first(std::uint32_t dir, std::uint32_t name) {
    const std::uint32_t first = m_name_first[name];
    if (first == k_no_first) {
      return false;
    }
    if (m_dir_listing.size() <= dir) {
      m_dir_listing.resize(m_dir_names.size());
    }
    auto& [looked, listing] = m_dir_listing[dir];
    if (!looked) {
      looked = true;
      listing = m_directories.listing_of(record_dir(m_dir_names[dir]));
    }
    if (listing == nullptr || listing->contains(m_first_names[first])) {
      return false;
    }
    if (m_first_recorded.insert(static_cast<std::uint64_t>(dir) << 32 | first).second) {
      m_directories.note_missing(record_dir(m_dir_names[dir]), m_first_names[first]);
    }
    return true;
  }

  // Directory `dir` as the candidate paths in it name their parent (dir_of(join(dir, name))).
  static std::string record_dir(const std::string& dir) {
    if (dir.empty() || dir == ".") {
      return ".";
    }
    if (dir == "/" || dir.back() != '/') {
      return dir;
    }
    return dir.substr(0, dir.size() - 1);
  }

  // consider() for include name `name` in directory `dir`.
  Result<void> consider_in(const std::string& dir, const std::string& name, const DirList& includer_dirs) {
    const std::string path = join(dir, name);
    const std::size_t at = name.empty() || name.front() == '/' ? std::string::npos : path.size() - name.size();
    return consider(path, includer_dirs, at);
  }

  // A candidate path: takes it when it is a user header. `at`: where the
  // include name starts in `path` (npos: an absolute name).
  Result<void> consider(const std::string& path, const DirList& includer_dirs, std::size_t at = std::string::npos) {
    if (m_found.contains(path)) {
      return {};
    }
    if (at != std::string::npos && m_directories.absent_by_listing(path, at)) {
      return {};
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      m_directories.note_absent(path);
      return {};
    }
    if (in_toolkit_dir(path)) {
      // Reached through a path outside the toolkit (a symlink): record the
      // directory, whose identity changes if the link is pointed elsewhere.
      m_directories.note_dir_or_ancestor(dir_of(path));
      m_tk_pending.push_back(canonical_dir(dir_of(path)) + "/" + base_of(path));
      return {};
    }
    auto facts = facts_for(path, st);
    if (!facts) {
      return tl::unexpected(facts.error());
    }
    Facts f = std::move(*facts);
    add_defines(f->directives.defines);
    Work next;
    next.directives = f->directives.includes;
    // Quoted includes search the including file's directory; EDG may also
    // search the directories of the files that included it, so take those too.
    next.includer_dirs = {dir_id(dir_of(path))};
    for (const auto dir : includer_dirs) {
      if (std::find(next.includer_dirs.begin(), next.includer_dirs.end(), dir) == next.includer_dirs.end()) {
        next.includer_dirs.push_back(dir);
      }
    }
    next.where = path;
    if (!(trusted(f->stamp) == f->stamp)) {
      auto untrusted = std::make_shared<ManifestHeader>(*f);
      untrusted->stamp = FileStamp{};
      f = std::move(untrusted);
    }
    m_found.emplace(path, std::move(f));
    m_work.push_back(std::move(next));
    return {};
  }

  // What `path` (whose stat is `st`) holds: from the process memo or the
  // previous manifest when its identity is the same, else read.
  Result<Facts> facts_for(const std::string& path, const struct stat& st) {
    const FileStamp s = stamp_of(st);
    if (Facts f = remembered_facts(path, s)) {
      return f;
    }
    if (const auto it = m_previous.find(path); it != m_previous.end() && it->second->stamp == s) {
      auto f = std::make_shared<const ManifestHeader>(*it->second);
      remember(f);
      return f;
    }
    auto h = std::make_shared<ManifestHeader>();
    if (auto r = load(path, *h, m_read_buffer); !r) {
      return tl::unexpected(r.error());
    }
    Facts f = std::move(h);
    remember(f);
    return f;
  }

  void remember(const Facts& h) {
    if (is_racy(h->stamp, m_now)) {
      return;  // a later write in the same timestamp tick would look unchanged
    }
    remember_facts(h);
  }

  // Follows the toolkit headers reached so far to the names they can include,
  // and checks every user directory for each name not checked there yet.
  Result<void> check_shadows() {
    if (m_toolkit_root.empty()) {
      return {};
    }
    if (!m_tk_pending.empty()) {
      m_reached_toolkit = true;
      load_toolkit();
      if (m_tk_dirs.empty()) {
        for (const auto& d : m_in.include_dirs) {
          if (m_dirs_in_toolkit.contains(d)) {
            m_tk_dirs.push_back(canonical_dir(d));
          }
        }
      }
      reachable_names(*m_toolkit, m_tk_pending, m_tk_dirs, m_tk_visited, m_tk_names, m_tk_seen);
      m_tk_pending.clear();
      while (m_tk_first.size() < m_tk_names.size()) {
        const std::string& n = m_tk_names[m_tk_first.size()];
        m_tk_first.push_back(n.front() == '/' ? k_no_first : id_of(m_first_ids, &m_first_names, n.substr(0, n.find('/'))));
      }
    }
    if (m_tk_names.empty()) {
      // No toolkit header reached yet: no name to be shadowed, so no user
      // directory is stat'ed, listed or recorded for it (a source that
      // includes nothing keys by its bytes alone).
      return {};
    }
    std::vector<std::string> dirs;
    for (const auto& d : m_in.include_dirs) {
      if (!m_dirs_in_toolkit.contains(d)) {
        dirs.push_back(d);
      }
    }
    dirs.insert(dirs.end(), m_main_dirs.begin(), m_main_dirs.end());
    for (const auto& [path, h] : m_found) {
      dirs.push_back(dir_of(path));
    }
    for (const auto& d : dirs) {
      const std::string dd = d.empty() ? "." : d;
      auto [it, fresh] = m_shadow.try_emplace(dd);
      Shadow& sh = it->second;
      if (fresh) {
        sh.id = dir_id(dd);
        const auto c = canonical_dir(dd);
        sh.skip = c == m_toolkit_root || under(c, m_toolkit_root);
        if (!sh.skip) {
          // The directory's identity first, then its listing: an entry added
          // after the stat changes the identity, so the next scan looks again.
          sh.names = m_directories.note_dir(dd);
          if (sh.names == nullptr) {
            m_directories.note_absent(dd);
            sh.skip = true;
          } else {
            sh.listing = m_directories.listing_of(dd);  // null (unreadable): every name is stat'ed
          }
        }
      }
      if (sh.skip) {
        sh.checked = m_tk_names.size();
        continue;
      }
      sh.first_state.resize(m_first_names.size(), 0);
      for (; sh.checked < m_tk_names.size(); ++sh.checked) {
        const std::uint32_t f = m_tk_first[sh.checked];
        if (f == k_no_first) {
          continue;  // an absolute name: not found through a directory
        }
        // Decided once per directory and first component: most names a
        // toolkit header can reach share a few first components.
        std::int8_t& state = sh.first_state[f];
        if (state == 0) {
          const std::string& first = m_first_names[f];
          state = first != "." && first != ".." && sh.listing != nullptr && !sh.listing->contains(first) ? 1 : 2;
          if (state == 1) {
            sh.names->emplace(first, 'n');  // the directory must keep lacking it
          }
        }
        if (state == 1) {
          continue;
        }
        if (auto r = consider_in(dd, m_tk_names[sh.checked], {sh.id}); !r) {
          return r;
        }
      }
    }
    return {};
  }

  void load_toolkit() {
    if (!m_toolkit && m_toolkit_ahead.valid()) {
      m_toolkit = m_toolkit_ahead.get();
    }
    if (!m_toolkit) {
      m_toolkit = toolkit_includes(m_in.toolkit_root, m_in.toolkit_fingerprint, m_in.user_memo_dir, m_in.memo_dir);
    }
  }

  // Starts load_toolkit()'s read on a thread of its own, where a toolkit
  // include directory is on the search path (its headers are then almost
  // surely reached) and it is worth a thread
  // (toolkit_includes_worth_prefetching(): in a single-threaded program,
  // only a first use, which reads the toolkit's ~2 000 headers while this
  // thread reads the user's). The result is toolkit_includes()'s either way;
  // a scan that never needs it waits for the thread when it ends.
  void read_toolkit_ahead() {
    if (m_dirs_in_toolkit.empty() || m_toolkit_ahead.valid() ||
        !toolkit_includes_worth_prefetching(m_in.toolkit_root, m_in.toolkit_fingerprint, m_in.user_memo_dir,
                                            m_in.memo_dir)) {
      return;
    }
    // The result is handed over as soon as it is known; the thread goes on
    // to write the memo file (joined when the scan ends). A result that
    // cannot be had (an exception on the thread) is null: load_toolkit()
    // then reads it on this thread.
    std::promise<std::shared_ptr<const ToolkitIncludes>> promise;
    m_toolkit_ahead = promise.get_future();
    try {
      m_toolkit_thread = std::jthread([promise = std::move(promise), root = m_in.toolkit_root,
                                       fingerprint = m_in.toolkit_fingerprint, user = m_in.user_memo_dir,
                                       memo = m_in.memo_dir]() mutable {
        bool handed = false;
        auto hand = [&](const std::shared_ptr<const ToolkitIncludes>& t) {
          if (!handed) {
            handed = true;
            promise.set_value(t);
          }
        };
        try {
          hand(toolkit_includes(root, fingerprint, user, memo, hand));
        } catch (...) {
          hand(nullptr);
        }
      });
    } catch (const std::system_error&) {
      m_toolkit_ahead = {};  // no thread to be had: load_toolkit() reads it on this one
    }
  }

  // Expands the computed includes (deps/computed_includes.hpp) with the
  // toolkit's definitions behind the scan's own.
  void expand_computed() {
    if (m_toolkit_root.empty()) {
      m_table.fallback = nullptr;
    } else if (!m_table.fallback) {
      m_table.fallback = [this](std::string_view name) -> const std::vector<MacroDefinition>* {
        load_toolkit();
        return m_toolkit->find_define(name);
      };
    }
    m_computed.expand();
  }

  const ScanInput& m_in;
  std::string m_toolkit_root;
  std::int64_t m_now;
  std::map<std::string, const ManifestHeader*> m_previous;
  std::set<std::string> m_dirs_in_toolkit;
  std::vector<std::string> m_main_dirs;
  NameDirectoryCheck m_name_dir;  // whether the program name's directory reaches the output
  bool m_reached_toolkit = false;  // a toolkit header (not scanned) is reached
  std::set<std::string> m_memory_done;
  std::deque<Work> m_work;
  MacroTable m_table;
  std::uint64_t m_table_version = 0;
  std::map<std::string, Facts> m_found;
  ScanDirectories m_directories;
  std::unordered_map<std::string, std::uint32_t> m_dir_ids;
  std::vector<std::string> m_dir_names;  // by id
  std::unordered_map<std::string, std::uint32_t> m_name_ids;
  std::vector<std::uint32_t> m_name_first;  // per name id: its first component's id (k_no_first: none usable)
  std::vector<std::pair<bool, const DirectoryListing*>> m_dir_listing;  // per dir id, once looked up
  std::unordered_set<std::uint64_t> m_first_recorded;  // (dir, first component) recorded absent
  DirList m_include_ids;                   // of m_in.include_dirs
  std::vector<std::uint64_t> m_tried;      // (directory, name) pairs tried, plus one; size a power of two
  std::size_t m_tried_count = 0;
  struct Shadow {
    bool skip = false;
    ScanDirectories::Names* names = nullptr;    // the directory's record in m_directories
    const DirectoryListing* listing = nullptr;  // owned by m_directories
    std::uint32_t id = 0;                       // dir_id()
    std::vector<std::int8_t> first_state;       // by first-component id: 0 unknown, 1 absent, 2 look
    std::size_t checked = 0;  // m_tk_names[0, checked) are checked here
  };
  std::map<std::string, Shadow> m_shadow;
  std::shared_ptr<const ToolkitIncludes> m_toolkit;
  std::vector<std::string> m_tk_pending;  // toolkit headers reached, not followed yet
  std::vector<std::string> m_tk_dirs;     // the toolkit include directories, canonical
  std::set<std::string> m_tk_visited;
  std::vector<std::string> m_tk_names;    // names reachable from the toolkit headers reached
  static constexpr std::uint32_t k_no_first = 0xffffffff;
  std::vector<std::uint32_t> m_tk_first;  // per name: the id of its first component (k_no_first: absolute)
  std::unordered_map<std::string, std::uint32_t> m_first_ids;
  std::vector<std::string> m_first_names;  // by id
  std::set<std::string> m_tk_seen;
  HeaderManifest m_manifest;
  ComputedIncludes m_computed;  // after m_table, m_work and m_manifest, which it refers to
  std::string m_read_buffer;  // load()'s, for every header read
  // read_toolkit_ahead()'s result, and its thread: last, so that it is
  // joined before any other member goes.
  std::future<std::shared_ptr<const ToolkitIncludes>> m_toolkit_ahead;
  std::jthread m_toolkit_thread;
};

}  // namespace

Result<HeaderManifest> scan_closure(const ScanInput& in, const HeaderManifest* previous, bool with_predefined) {
  ClosureScan scan(in, previous, with_predefined);
  if (auto r = scan.run(); !r) {
    return tl::unexpected(r.error());
  }
  return std::move(scan.manifest());
}

}  // namespace kcache::jit
