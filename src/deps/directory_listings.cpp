#include "deps/directory_listings.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "deps/memo_reader.hpp"
#include "util/atomic_write.hpp"
#include "util/fd.hpp"
#include "util/posix_io.hpp"

namespace kcache::jit {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_magic = "kcache-dir-listing 2\n";
constexpr std::string_view k_dir_name = "listings.2";
constexpr std::string_view k_v1_file_name = "listings";  // format 1: removed by a save
constexpr std::size_t k_shard_files = k_max_listings / k_listing_shards;
constexpr std::size_t k_shard_bytes = k_max_listings_bytes / k_listing_shards;
constexpr std::int64_t k_stale_temporary_ns = 3600LL * 1000 * 1000 * 1000;
static_assert(k_max_listing_file_bytes <= k_shard_bytes, "one listing must fit its shard");

using Identity = std::pair<std::uint64_t, std::uint64_t>;  // device, inode

struct Memo {
  std::mutex mutex;
  std::map<Identity, std::shared_ptr<const DirectoryListing>> known;
  std::vector<std::shared_ptr<const DirectoryListing>> fresh;  // read here, not saved yet
};

Memo& memo() {
  static auto* m = new Memo();  // NOLINT: process lifetime
  return *m;
}

std::atomic<std::uint64_t> g_bytes_read{0};

bool valid_name(std::string_view n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string_view::npos &&
         n.find('\0') == std::string_view::npos;
}

std::string file_name(std::uint64_t dev, std::uint64_t ino) { return std::to_string(dev) + '-' + std::to_string(ino); }

// A name a save gives a listing file ("<dev>-<ino>"); anything else in a
// shard is a temporary (or a stranger), swept once old.
bool listing_name(std::string_view n) {
  const auto dash = n.find('-');
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return dash != std::string_view::npos && digits(n.substr(0, dash)) && digits(n.substr(dash + 1));
}

std::string shard_name(std::uint64_t dev, std::uint64_t ino) {
  // A 64-bit mix (splitmix64's finaliser): neighbouring inodes spread evenly.
  std::uint64_t z = ino + dev * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  constexpr char hex[] = "0123456789abcdef";
  const auto s = static_cast<unsigned>(z % k_listing_shards);
  return {hex[(s >> 4) & 15], hex[s & 15]};
}

// The remembered listing of (dev, ino) from its file; nothing when there is
// none or it is not exactly right.
std::optional<DirectoryListing> load_listing(const fs::path& memo_dir, const Identity& id) {
  if (memo_dir.empty()) {
    return std::nullopt;
  }
  util::Fd fd(::open(listing_file(memo_dir, id.first, id.second).c_str(),
                      O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));  // a FIFO planted here never blocks
  if (!fd) {
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<std::uint64_t>(st.st_size) > k_max_listing_file_bytes) {
    return std::nullopt;
  }
  std::string text;
  const int err =
      util::io::read_bounded(fd.get(), k_max_listing_file_bytes, text, static_cast<std::size_t>(st.st_size));
  g_bytes_read.fetch_add(text.size(), std::memory_order_relaxed);
  if (err != 0) {
    return std::nullopt;
  }
  auto l = parse_directory_listing(text);
  if (!l || l->stamp.dev != id.first || l->stamp.ino != id.second) {
    return std::nullopt;  // a file under another directory's name is not believed
  }
  return l;
}

// Keeps shard directory `dir` within k_shard_files and k_shard_bytes (the
// oldest listing files go first) and sweeps temporaries an hour old.
void bound_shard(const fs::path& dir, std::int64_t now_ns) {
  util::Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    return;
  }
  struct Entry {
    std::int64_t mtime_ns;
    std::uint64_t bytes;
    std::string name;
  };
  std::vector<Entry> files;
  std::uint64_t total = 0;
  util::io::for_each_dir_entry(fd.get(), [&](std::string_view n, unsigned char /*type*/) {
    struct stat st {};
    if (::fstatat(fd.get(), n.data(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return;
    }
    const std::int64_t mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (!listing_name(n) || !S_ISREG(st.st_mode)) {
      if (now_ns - mtime_ns > k_stale_temporary_ns) {
        (void)::unlinkat(fd.get(), n.data(), 0);
      }
      return;
    }
    files.push_back({mtime_ns, static_cast<std::uint64_t>(st.st_size), std::string(n)});
    total += static_cast<std::uint64_t>(st.st_size);
  });
  if (files.size() <= k_shard_files && total <= k_shard_bytes) {
    return;
  }
  std::sort(files.begin(), files.end(), [](const Entry& a, const Entry& b) { return a.mtime_ns < b.mtime_ns; });
  std::size_t left = files.size();
  for (const auto& f : files) {
    if (left <= k_shard_files && total <= k_shard_bytes) {
      break;
    }
    if (::unlinkat(fd.get(), f.name.c_str(), 0) == 0) {
      --left;
      total -= f.bytes;
    }
  }
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
  auto listing = std::make_shared<DirectoryListing>();
  // A listing read only in part must not say a name is absent: none then.
  if (util::io::for_each_dir_entry(fd.get(), [&](std::string_view n, unsigned char /*type*/) {
        listing->names.emplace_back(n);
      }) != 0) {
    return nullptr;
  }
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
    if (const auto it = m.known.find(id); it != m.known.end() && it->second->stamp == want) {
      return it->second;
    }
  }
  // Only this directory's file is read: a lookup costs the same however many
  // listings are remembered.
  if (auto l = load_listing(memo_dir, id); l && l->stamp == want) {
    auto shared = std::make_shared<const DirectoryListing>(std::move(*l));
    std::lock_guard lock(m.mutex);
    if (m.known.size() >= k_max_listings) {
      m.known.clear();
    }
    m.known[id] = shared;
    return shared;
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
  (void)::unlink((memo_dir / k_v1_file_name).c_str());  // format 1, never read again
  std::set<fs::path> shards;
  for (const auto& l : fresh) {
    const std::string text = serialize_directory_listing(*l);
    if (text.size() > k_max_listing_file_bytes) {
      continue;  // read again by every scan, as a racy one
    }
    const fs::path file = listing_file(memo_dir, l->stamp.dev, l->stamp.ino);
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (util::write_file_atomically(file, text, 0600, util::FileSync::none)) {
      shards.insert(file.parent_path());
    }
  }
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  for (const auto& dir : shards) {
    bound_shard(dir, now);
  }
}

void forget_directory_listings() {
  std::lock_guard lock(memo().mutex);
  memo().known.clear();
  memo().fresh.clear();
}

fs::path listing_file(const fs::path& memo_dir, std::uint64_t dev, std::uint64_t ino) {
  return memo_dir / k_dir_name / shard_name(dev, ino) / file_name(dev, ino);
}

std::uint64_t listing_bytes_read() { return g_bytes_read.load(std::memory_order_relaxed); }

std::string serialize_directory_listing(const DirectoryListing& l) {
  std::string out(k_magic);
  out += "dir " + std::to_string(l.stamp.dev) + ' ' + std::to_string(l.stamp.ino) + ' ' +
         std::to_string(l.stamp.size) + ' ' + std::to_string(l.stamp.mtime_ns) + ' ' +
         std::to_string(l.stamp.ctime_ns) + ' ' + std::to_string(l.names.size()) + '\n';
  for (const auto& n : l.names) {
    out += std::to_string(n.size());
    out += ':';
    out += n;
    out += '\n';
  }
  out += "end\n";
  return out;
}

std::optional<DirectoryListing> parse_directory_listing(std::string_view text) {
  if (text.size() > k_max_listing_file_bytes) {
    return std::nullopt;
  }
  MemoReader c(text);
  DirectoryListing l;
  std::size_t count = 0;
  if (!c.lit(k_magic) || !c.lit("dir ") || !c.stamp(l.stamp) || !c.lit(" ") || !c.num(count) || !c.lit("\n") ||
      count > k_max_listing_names || l.stamp.size < 0 || l.stamp.mtime_ns < 0 || l.stamp.ctime_ns < 0) {
    return std::nullopt;
  }
  l.names.reserve(std::min<std::size_t>(count, text.size() / 4));
  for (std::size_t i = 0; i < count; ++i) {
    std::string n;
    if (!c.str(n) || !c.lit("\n") || !valid_name(n) || (!l.names.empty() && l.names.back() >= n)) {
      return std::nullopt;  // names are valid, sorted and unique
    }
    l.names.push_back(std::move(n));
  }
  if (!c.lit("end\n") || !c.at_end()) {
    return std::nullopt;
  }
  return l;
}

}  // namespace kcache::jit
