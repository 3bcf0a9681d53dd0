// bundle/bundle_file.hpp: a bundle file, memory-mapped and checked.
//
// open() opens the file as every reader of a user-named file does
// (util/input_file.hpp: a symlink is followed, a FIFO or device is refused
// without blocking), maps it read-only and checks, in order, its structure
// (sizes, magic, version, the canonical layout of bundle_format.hpp, zero
// padding), the digest in its trailer, and every passport (strict parse, in
// its one canonical encoding, its key equal to its record's,
// check_entry_identity, payload size). It does not judge the signature
// (check_signature) nor hash the payloads (check_payload): `bundle ls` needs
// neither, the bundle tier hashes a payload on its first hit.
//
// Bounds before allocation: the header's entry_count is bounded by what the
// file can hold (each entry needs a 64-byte record and a payload of its own
// 4096-aligned block), and every record is checked against the layout before
// anything is allocated for the entries, so a lying header or a sparse file
// (`truncate -s 16G`) costs nothing: the first record that is not where the
// layout puts it refuses the file.
//
// Cost of open(): one SHA-256 over the metadata (header, index, passports,
// padding: about 4 KiB per entry), a parse and a re-serialisation of every
// passport; no payload byte is read. Memory: the metadata pages touched and
// the parsed passports; payloads are never paged in by open().
//
// Payload reads (check_payload, copy_payload) go through the file, in
// bounded chunks, never through the mapping: memory stays at one chunk (1
// MiB) whatever the payload's size, a file truncated under the reader is a
// `truncated` refusal instead of a fault, and copy_payload hands on exactly
// the bytes it hashed. The mapping serves the bundle tier's hits (payload()),
// which share it without a copy: a bundle must not be changed in place while
// it is mapped; a byte changed later is caught by the checks of a read
// (BundleStore), a file truncated under the mapping faults (SIGBUS) when the
// mapping is read, as FileStore's mapped reads document.
//
// Remembered bundles: open() given BundleVerdicts that hold this file's seal
// (bundle/bundle_verdicts.hpp: the same file, unchanged since it passed every
// check) checks only the header and the trailer, and each entry the first time
// entry() is asked for it (its record's place, padding, passport: the checks
// above, one entry at a time); check_signature() then compares the signer with
// the trusted keys and does not verify the signature again. Cost: one small
// file read, whatever the bundle's size.
//
// Thread-safety: immutable after open() but for the entries a remembered
// bundle checks on first use (under a mutex); every const method is thread-safe.
#pragma once

#include "bundle/bundle_verdicts.hpp"
#include "kcache/bundle.hpp"
#include "kcache/payload.hpp"
#include "util/fd.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::bundle {

// Builds the refusal error of `file`: "bundle <file> refused (<reason>): <detail>".
Error refusal(const std::filesystem::path& file, std::string_view reason, const std::string& detail,
              ErrorCode code = ErrorCode::corrupt);

class BundleFile : public std::enable_shared_from_this<BundleFile> {
public:
  struct Entry {
    Key key;
    std::uint64_t passport_offset = 0;
    std::uint64_t passport_size = 0;
    std::uint64_t payload_offset = 0;
    std::uint64_t payload_size = 0;
    Passport passport;
  };

  // Receives the chunks of a payload copy_payload() reads; an error stops the copy and is returned.
  using ChunkSink = std::function<Result<void>(std::string_view chunk)>;

  // The largest chunk check_payload and copy_payload read at once.
  static constexpr std::size_t k_chunk = std::size_t{1} << 20;

  // Maps and checks `path` (see above). Errors: see kcache/bundle.hpp; a
  // path that is missing, not a regular file or unreadable: the messages of
  // util/input_file.hpp ("bundle FILE is a FIFO, not a regular file").
  // With `verdicts` holding this file's seal the bundle is remembered (above).
  static Result<std::shared_ptr<const BundleFile>> open(const std::filesystem::path& path,
                                                        const BundleVerdicts* verdicts = nullptr);
  ~BundleFile();
  BundleFile(const BundleFile&) = delete;
  BundleFile& operator=(const BundleFile&) = delete;

  // Checks the trailer's signature against `trust`: `unsigned`,
  // `untrusted-key` or `bad-signature` refusals, or `unsupported` when
  // libcrypto cannot be loaded. A remembered bundle: the signer's key only.
  Result<void> check_signature(const BundleTrust& trust) const;

  // Hashes the payload of `e` (read from the file in chunks) and compares it
  // with its passport: `payload-mismatch`; `truncated` when the file shrank
  // since open(); an errno-based error when it cannot be read.
  Result<void> check_payload(const Entry& e) const;

  // Reads the payload of `e` from the file in chunks of at most k_chunk bytes into a
  // buffer of its own, hashes each chunk and only then hands it to `sink`;
  // after the last chunk compares the hash with the passport. Success: `sink`
  // received exactly the payload its passport names. `payload-mismatch`: the
  // bytes read do not match (changed in place since they were checked, or
  // never matched): what `sink` received must not be used. `truncated`, read
  // errors and `sink`'s own errors as for check_payload.
  Result<void> copy_payload(const Entry& e, const ChunkSink& sink) const;

  // The position of `key` in the index, found by binary search over the
  // mapped index records; nullopt when the bundle does not hold it.
  std::optional<std::size_t> find(const Key& key) const noexcept;

  // How many entries the bundle holds.
  std::size_t count() const noexcept { return static_cast<std::size_t>(m_count); }
  // Entry `i` (< count()), checked: a remembered bundle checks it now, the
  // first time, and returns its refusal (`bad-index`, `bad-entry`,
  // `entry-mismatch`) when it fails.
  Result<const Entry*> entry(std::size_t i) const;
  // Every entry. REQUIRES: !remembered() (`bundle verify`, `ls`, `install`
  // open bundles in full).
  const std::vector<Entry>& entries() const noexcept { return m_entries; }
  // The payload of `e`, sharing the mapping (no copy).
  Payload payload(const Entry& e) const;
  std::string_view payload_view(const Entry& e) const noexcept;

  // Opened under a remembered verdict (above).
  bool remembered() const noexcept { return m_remembered; }
  // The file's seal and stat, as of open().
  const BundleSeal& seal() const noexcept { return m_seal; }
  const struct stat& file_stat() const noexcept { return m_stat; }

  BundleInfo info() const;
  const std::filesystem::path& path() const noexcept { return m_path; }
  std::uint64_t size() const noexcept { return m_size; }

private:
  BundleFile() = default;
  Result<void> check_header();
  Result<void> check_records();
  Result<void> check_digest();
  Result<void> read_passports();
  // The entry of record `i`, its place in the layout checked, and with
  // `padding` the zero padding around it (check_records checks the places of
  // all records, in order, before any padding).
  Result<Entry> read_record(std::uint64_t i, bool padding) const;
  // Parses and checks the passport of `e` (strict, its key, its size; with
  // `canonical` its one encoding, which a remembered bundle's full check saw).
  Result<void> read_passport(Entry& e, bool canonical) const;
  Error refused(std::string_view reason, const std::string& detail,
                ErrorCode code = ErrorCode::corrupt) const {
    return refusal(m_path, reason, detail, code);
  }

  std::filesystem::path m_path;
  util::Fd m_fd;
  const char* m_map = nullptr;
  std::uint64_t m_size = 0;
  std::uint64_t m_count = 0;
  std::uint64_t m_trailer = 0;
  std::vector<Entry> m_entries;  // every entry; empty when remembered
  BundleSeal m_seal;
  struct stat m_stat {};
  bool m_remembered = false;
  mutable std::mutex m_lazy_mutex;  // a remembered bundle's entries, checked on first use
  mutable std::unordered_map<std::uint64_t, std::unique_ptr<Entry>> m_lazy;
};

} // namespace kcache::bundle
