// BundleVerdicts: remembered verdicts on bundle files (bundle_verdicts.hpp).
#include "bundle/bundle_verdicts.hpp"

#include <fcntl.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "util/atomic_write.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

namespace kcache::bundle {

namespace {

constexpr std::size_t k_max_verdict_bytes = 1024;

std::int64_t ns_of(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::string identity_of(const BundleSeal& s) {
  return fmt::format("{} {} {} {} {}", s.dev, s.ino, s.size, s.mtime_ns, s.ctime_ns);
}

std::string line_of(const BundleSeal& s) {
  return fmt::format("kcache-bundle-verdict 1 {} {}\n", identity_of(s), s.trailer_hex);
}

}  // namespace

BundleSeal BundleSeal::of(const struct stat& st, std::string_view trailer_hex) {
  BundleSeal s;
  s.dev = static_cast<std::uint64_t>(st.st_dev);
  s.ino = static_cast<std::uint64_t>(st.st_ino);
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.mtime_ns = ns_of(st.st_mtim);
  s.ctime_ns = ns_of(st.st_ctim);
  s.trailer_hex = std::string(trailer_hex);
  return s;
}

bool BundleSeal::same_file(const struct stat& st) const noexcept {
  return dev == static_cast<std::uint64_t>(st.st_dev) && ino == static_cast<std::uint64_t>(st.st_ino) &&
         size == static_cast<std::uint64_t>(st.st_size) && mtime_ns == ns_of(st.st_mtim) &&
         ctime_ns == ns_of(st.st_ctim);
}

std::filesystem::path BundleVerdicts::place_of(const BundleSeal& seal) const {
  return m_dir / util::sha256_hex("kcache-bundle-verdict-1\n" + identity_of(seal));
}

util::Fd BundleVerdicts::open_place(const BundleSeal& seal) const {
  if (m_dir.empty()) {
    return util::Fd();
  }
  return util::Fd(util::io::openat(AT_FDCWD, place_of(seal).c_str(),
                                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

bool BundleVerdicts::holds(const BundleSeal& seal) const {
  if (m_dir.empty()) {
    return false;
  }
  const auto text =
      util::io::read_small_file((place_of(seal) / "verdict").string(), k_max_verdict_bytes, O_NOFOLLOW);
  return text && *text == line_of(seal);
}

void BundleVerdicts::remember(const BundleSeal& seal, const struct stat& after, std::int64_t now_ns) const {
  constexpr std::int64_t settle_ns = k_settle_seconds * 1'000'000'000;
  if (m_dir.empty() || !seal.same_file(after) || now_ns - seal.mtime_ns < settle_ns ||
      now_ns - seal.ctime_ns < settle_ns) {
    return;
  }
  const std::filesystem::path place = place_of(seal);
  std::error_code ec;
  if (std::filesystem::create_directories(m_dir, ec)) {
    ::chmod(m_dir.c_str(), 0700);
  }
  if (std::filesystem::create_directory(place, ec)) {
    ::chmod(place.c_str(), 0700);
  }
  (void)util::write_file_atomically(place / "verdict", line_of(seal), 0600, util::FileSync::none);
  // Bundles replaced long ago leave their verdicts behind: keep the newest.
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> places;
  for (auto it = std::filesystem::directory_iterator(m_dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    places.emplace_back(it->last_write_time(ec), it->path());
  }
  if (places.size() > k_max_verdicts) {
    std::sort(places.begin(), places.end());
    for (std::size_t i = 0; i + k_max_verdicts < places.size(); ++i) {
      std::filesystem::remove_all(places[i].second, ec);
    }
  }
}

}  // namespace kcache::bundle
