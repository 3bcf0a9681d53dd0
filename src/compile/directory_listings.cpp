#include "compile/directory_listings.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"
#include "compile/memo_reader.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-dir-listings 1\n";
constexpr std::string_view k_file_name = "listings";

using Identity = std::pair<std::uint64_t, std::uint64_t>;  // device, inode

struct Memo {
  std::mutex mutex;
  std::map<Identity, std::shared_ptr<const DirectoryListing>> known;
  std::vector<std::shared_ptr<const DirectoryListing>> fresh;  // read here, not saved yet
  std::optional<fs::path> loaded;                               // the memo dir read into `known`
};

Memo& memo() {
  static auto* m = new Memo();  // NOLINT: process lifetime
  return *m;
}

bool valid_name(std::string_view n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string_view::npos &&
         n.find('\0') == std::string_view::npos;
}

std::optional<std::string> read_memo_file(const fs::path& file) {
  util::Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<std::uint64_t>(st.st_size) > k_max_listings_bytes) {
    return std::nullopt;
  }
  std::string text;
  if (util::io::read_bounded(fd.get(), k_max_listings_bytes, text, static_cast<std::size_t>(st.st_size)) != 0 ||
      text.size() > k_max_listings_bytes) {
    return std::nullopt;
  }
  return text;
}

std::vector<DirectoryListing> load_file(const fs::path& memo_dir) {
  if (memo_dir.empty()) {
    return {};
  }
  const auto text = read_memo_file(memo_dir / k_file_name);
  if (!text) {
    return {};
  }
  auto parsed = parse_directory_listings(*text);
  return parsed ? std::move(*parsed) : std::vector<DirectoryListing>{};
}

// Reads directory `path`; the stamp is zero when it changed while being read.
std::shared_ptr<DirectoryListing> read_listing(const std::string& path) {
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    return nullptr;
  }
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0) {
    return nullptr;
  }
  const int copy = ::dup(fd.get());
  if (copy < 0) {
    return nullptr;
  }
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return nullptr;
  }
  auto listing = std::make_shared<DirectoryListing>();
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      listing->names.emplace_back(n);
    }
  }
  ::closedir(d);
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0) {
    return nullptr;
  }
  std::sort(listing->names.begin(), listing->names.end());
  listing->names.erase(std::unique(listing->names.begin(), listing->names.end()), listing->names.end());
  listing->stamp = stamp_of(before) == stamp_of(after) ? stamp_of(after) : FileStamp{};
  return listing;
}

}  // namespace

bool DirectoryListing::contains(std::string_view name) const {
  return std::binary_search(names.begin(), names.end(), name,
                            [](std::string_view a, std::string_view b) { return a < b; });
}

std::shared_ptr<const DirectoryListing> directory_listing(const std::string& path, const struct stat& st,
                                                          const fs::path& memo_dir, std::int64_t now_ns) {
  const FileStamp want = stamp_of(st);
  const Identity id{want.dev, want.ino};
  Memo& m = memo();
  {
    std::lock_guard lock(m.mutex);
    if (!m.loaded || *m.loaded != memo_dir) {
      // Another cache directory: what this process learnt stays (it describes
      // the same directories), the file of the new one is added.
      m.loaded = memo_dir;
      for (auto& l : load_file(memo_dir)) {
        const Identity lid{l.stamp.dev, l.stamp.ino};
        m.known[lid] = std::make_shared<const DirectoryListing>(std::move(l));
      }
    }
    if (const auto it = m.known.find(id); it != m.known.end() && it->second->stamp == want) {
      return it->second;
    }
  }
  auto listing = read_listing(path);
  if (!listing) {
    return nullptr;
  }
  std::shared_ptr<const DirectoryListing> shared = listing;
  // (A time before 1970 is not remembered: the file's grammar has no sign.)
  if (listing->stamp == want && !is_racy(want, now_ns) && want.mtime_ns >= 0 && want.ctime_ns >= 0 &&
      listing->names.size() <= k_max_listing_names) {
    std::lock_guard lock(m.mutex);
    if (m.known.size() >= k_max_listings) {
      m.known.clear();
    }
    m.known[id] = shared;
    if (m.fresh.size() < k_max_listings) {
      m.fresh.push_back(shared);
    }
  }
  return shared;
}

void save_directory_listings(const fs::path& memo_dir) {
  std::vector<std::shared_ptr<const DirectoryListing>> fresh;
  {
    std::lock_guard lock(memo().mutex);
    fresh.swap(memo().fresh);
  }
  if (fresh.empty() || memo_dir.empty()) {
    return;
  }
  // What the file holds now (other processes' additions), less the
  // directories read again here, then this process's listings.
  std::set<Identity> replaced;
  for (const auto& l : fresh) {
    replaced.insert({l->stamp.dev, l->stamp.ino});
  }
  std::vector<DirectoryListing> all;
  for (auto& l : load_file(memo_dir)) {
    if (!replaced.contains({l.stamp.dev, l.stamp.ino})) {
      all.push_back(std::move(l));
    }
  }
  for (const auto& l : fresh) {
    all.push_back(*l);
  }
  std::size_t first = all.size() > k_max_listings ? all.size() - k_max_listings : 0;
  std::string text;
  while (true) {
    text = serialize_directory_listings(
        std::vector<DirectoryListing>(all.begin() + static_cast<std::ptrdiff_t>(first), all.end()));
    if (text.size() <= k_max_listings_bytes || first == all.size()) {
      break;
    }
    first += std::max<std::size_t>(1, (all.size() - first) / 8);  // drop the oldest eighth
    first = std::min(first, all.size());
  }
  if (text.size() > k_max_listings_bytes) {
    return;
  }
  std::error_code ec;
  fs::create_directories(memo_dir, ec);
  (void)util::write_file_atomically(memo_dir / k_file_name, text, 0600, util::FileSync::none);
}

void forget_directory_listings() {
  std::lock_guard lock(memo().mutex);
  memo().known.clear();
  memo().fresh.clear();
  memo().loaded.reset();
}

std::string serialize_directory_listings(const std::vector<DirectoryListing>& listings) {
  std::string out(k_magic);
  for (const auto& l : listings) {
    out += "dir " + std::to_string(l.stamp.dev) + ' ' + std::to_string(l.stamp.ino) + ' ' +
           std::to_string(l.stamp.size) + ' ' + std::to_string(l.stamp.mtime_ns) + ' ' +
           std::to_string(l.stamp.ctime_ns) + ' ' + std::to_string(l.names.size()) + '\n';
    for (const auto& n : l.names) {
      out += std::to_string(n.size());
      out += ':';
      out += n;
      out += '\n';
    }
  }
  out += "end\n";
  return out;
}

std::optional<std::vector<DirectoryListing>> parse_directory_listings(std::string_view text) {
  if (text.size() > k_max_listings_bytes) {
    return std::nullopt;
  }
  MemoReader c(text);
  if (!c.lit(k_magic)) {
    return std::nullopt;
  }
  std::vector<DirectoryListing> out;
  while (c.peek("dir ")) {
    DirectoryListing l;
    std::size_t count = 0;
    if (!c.lit("dir ") || !c.stamp(l.stamp) || !c.lit(" ") || !c.num(count) || !c.lit("\n") ||
        count > k_max_listing_names || out.size() >= k_max_listings || l.stamp.size < 0 || l.stamp.mtime_ns < 0 ||
        l.stamp.ctime_ns < 0) {
      return std::nullopt;
    }
    l.names.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      std::string n;
      if (!c.str(n) || !c.lit("\n") || !valid_name(n) || (!l.names.empty() && l.names.back() >= n)) {
        return std::nullopt;  // names are valid, sorted and unique
      }
      l.names.push_back(std::move(n));
    }
    out.push_back(std::move(l));
  }
  if (!c.lit("end\n") || !c.at_end()) {
    return std::nullopt;
  }
  return out;
}

}  // namespace kcache::jit
