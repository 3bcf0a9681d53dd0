// bundle/bundle_verdicts.hpp: remembered verdicts on bundle files (private).
//
// Before its first hit, a process must know that a mounted bundle is whole
// and signed by a trusted key. Checking it (BundleFile::open, check_signature)
// hashes about 4 KiB of metadata per entry and parses every passport: 12 ms
// for 1,000 entries, paid again by every process of a container whose image
// carries the bundle. A verdict remembers that one file passed: once a bundle
// file has passed every check and its signature verified, its seal is written
// here, and a later open of the same, unchanged file checks only its header
// and trailer and the entries it serves (BundleFile: "remembered").
//
// The seal names the file by what no writer can keep while changing a byte:
// device, inode, size, and modification and status-change times in
// nanoseconds (the status-change time cannot be set by a user; any write, or
// a rename over it, changes it), with the digest, public key and signature of
// its trailer. A verdict is written only when the file's times are at least
// `k_settle_seconds` old at the check and its stat is the same after the check
// as before it: a write in the same clock tick as the check (file times are
// coarse) cannot hide under a verdict. The trust decision itself is not
// remembered: the signer's key is compared with the trusted keys at every
// open, so a key removed from the trusted set refuses the bundle at once.
//
// Files: `<dir>/<sha256 of the seal's identity>/verdict`, one line
// `kcache-bundle-verdict 1 dev ino size mtime_ns ctime_ns digest key signature`
// (hex), mode 0600, written atomically, read without following a symlink and
// at most 1 KiB; anything else (damaged, forged for another file) is no
// verdict and the bundle is checked in full. Beside it, `checks`: the
// payloads of that file verified in full by SHA-256, as the disk tier keeps
// them (store/file/file_check_table.hpp, bound to the bundle file's inode,
// size and times), so a later process checks a payload with XXH3. The
// directory is the user's (`$XDG_CACHE_HOME/kcache-toolkit/bundle-verdicts/`):
// whoever can write there can already change the user's cache; a forged
// verdict still serves no entry whose passport or payload fails its own
// checks (BundleFile::entry, BundleStore::get). At most k_max_verdicts are
// kept, the oldest removed when one more is written.
//
// Thread-safety: const methods are thread-safe (no shared state).
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "util/fd.hpp"

namespace kcache::bundle {

// What identifies one bundle file's bytes (see above).
struct BundleSeal {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  std::string trailer_hex;  // digest, public key and signature, hex

  static BundleSeal of(const struct stat& st, std::string_view trailer_hex);
  bool same_file(const struct stat& st) const noexcept;
};

class BundleVerdicts {
public:
  // A file's times must be this old before its verdict is kept.
  static constexpr std::int64_t k_settle_seconds = 2;
  // At most this many verdicts are kept (the oldest go when one more is written).
  static constexpr std::size_t k_max_verdicts = 16;

  // `dir` empty: nothing is remembered (every open checks in full).
  explicit BundleVerdicts(std::filesystem::path dir) : m_dir(std::move(dir)) {}

  // True when a verdict for exactly `seal` is on record.
  bool holds(const BundleSeal& seal) const;
  // Records that the file of `seal` passed every check, if its times have
  // settled (`now_ns`) and `after` (a stat taken after the checks) shows the
  // same file. Best effort: a directory that cannot be written keeps nothing.
  void remember(const BundleSeal& seal, const struct stat& after, std::int64_t now_ns) const;

  // The directory of the verdict on `seal` (holding `checks`), opened without
  // following a symlink; an invalid Fd when there is none.
  util::Fd open_place(const BundleSeal& seal) const;

  const std::filesystem::path& dir() const noexcept { return m_dir; }

private:
  std::filesystem::path place_of(const BundleSeal& seal) const;
  std::filesystem::path m_dir;
};

}  // namespace kcache::bundle
