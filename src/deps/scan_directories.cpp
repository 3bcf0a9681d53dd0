#include "deps/scan_directories.hpp"

#include <string_view>
#include <utility>

namespace kcache::jit {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

namespace {

// A directory's identity without the parts a later change moves (size,
// times): its zero ctime never matches a real stat.
FileStamp which_directory(const FileStamp& s) { return FileStamp{s.dev, s.ino, 0, 0, 0}; }

void add_name(ScanDirectories::Names* names, const std::string& name, char what) {
  if (names != nullptr && !name.empty() && name.find('/') == std::string::npos) {
    names->emplace(name, what);
  }
}

}  // namespace

ScanDirectories::ScanDirectories(std::filesystem::path memo_dir, std::int64_t now_ns)
    : m_memo_dir(std::move(memo_dir)), m_now(now_ns) {}

ScanDirectories::State& ScanDirectories::state(const std::string& dir) {
  auto [it, fresh] = m_states.try_emplace(dir);
  if (fresh) {
    it->second.is_dir = ::stat(dir.c_str(), &it->second.st) == 0 && S_ISDIR(it->second.st.st_mode);
  }
  return it->second;
}

ScanDirectories::Names* ScanDirectories::note_dir(const std::string& dir) {
  if (const auto it = m_records.find(dir); it != m_records.end()) {
    return &it->second.second;
  }
  const State& s = state(dir);
  if (!s.is_dir) {
    return nullptr;
  }
  auto& rec = m_records[dir];
  const FileStamp stamp = stamp_of(s.st);
  // A stamp too recent to trust keeps only which directory it is (device and
  // inode), which never matches a whole stamp: its names decide, or, with no
  // names, that it is the same directory (header_manifest.hpp).
  rec.first = s.changed || is_racy(stamp, m_now) ? which_directory(stamp) : stamp;
  return &rec.second;
}

const DirectoryListing* ScanDirectories::listing_of(const std::string& dir) {
  State& s = state(dir);
  if (!s.is_dir) {
    return nullptr;
  }
  if (!s.listed) {
    s.listed = true;
    s.listing = directory_listing(dir, s.st, m_memo_dir, m_now);
    if (s.listing && !(s.listing->stamp == stamp_of(s.st))) {
      s.changed = true;  // changed since the stat: record no identity that could match later
      if (const auto it = m_records.find(dir); it != m_records.end()) {
        it->second.first = which_directory(it->second.first);
      }
    }
  }
  return s.listing.get();
}

bool ScanDirectories::absent_by_listing(const std::string& path, std::size_t at) {
  std::size_t s = at;
  while (true) {
    const std::size_t e = path.find('/', s);
    const std::string_view component =
        std::string_view(path).substr(s, e == std::string::npos ? std::string::npos : e - s);
    if (component.empty() || component == "." || component == "..") {
      return false;
    }
    // The parent as dir_of() names it, so the record is the one note_absent() makes.
    const std::string parent = s == 0 ? std::string(".") : (s == 1 ? std::string("/") : path.substr(0, s - 1));
    const DirectoryListing* listing = listing_of(parent);
    if (listing == nullptr) {
      return false;
    }
    if (!listing->contains(component)) {
      add_name(note_dir(parent), std::string(component), 'n');
      return true;
    }
    if (e == std::string::npos) {
      return false;
    }
    s = e + 1;
  }
}

void ScanDirectories::note_missing(const std::string& dir, const std::string& name) {
  add_name(note_dir(dir), name, 'n');
}

// When `path` exists (a directory, a FIFO) its directory must keep it a
// non-file; when it does not, the deepest existing directory above it must
// keep lacking the next component (or keep it a non-directory).
void ScanDirectories::note_absent(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    add_name(note_dir(dir_of(path)), base_of(path), 'x');
    return;
  }
  std::string p = path;
  char what = 'n';
  while (true) {
    const std::string q = dir_of(p);
    if (q == p) {
      return;
    }
    struct stat qs {};
    if (::stat(q.c_str(), &qs) == 0) {
      if (S_ISDIR(qs.st_mode)) {
        add_name(note_dir(q), base_of(p), what);
        return;
      }
      what = 'f';  // q exists but is no directory: it must stay one
    } else {
      what = 'n';
    }
    p = q;
  }
}

void ScanDirectories::note_dir_or_ancestor(const std::string& dir) {
  const std::string d = dir.empty() ? "." : dir;
  if (note_dir(d) == nullptr) {
    note_absent(d);
  }
}

std::vector<ManifestDir> ScanDirectories::records() const {
  std::vector<ManifestDir> out;
  for (const auto& [path, rec] : m_records) {
    ManifestDir md{path, rec.first, {}};
    md.names.assign(rec.second.begin(), rec.second.end());
    out.push_back(std::move(md));
  }
  return out;
}

}  // namespace kcache::jit
