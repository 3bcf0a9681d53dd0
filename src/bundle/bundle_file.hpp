// bundle/bundle_file.hpp: a bundle file, memory-mapped and checked.
//
// open() maps the file read-only and checks, in order, its structure (sizes,
// magic, version, the canonical layout of bundle_format.hpp, zero padding),
// the digest in its trailer, and every passport (strict parse, its key equal
// to its record's, check_entry_identity, payload size). It does not judge the
// signature (check_signature) nor hash the payloads (check_payload): `bundle
// ls` needs neither, the bundle tier hashes a payload on its first hit.
// Cost of open(): one SHA-256 over the metadata (header, index, passports,
// padding: about 4 KiB per entry), a parse of every passport; no payload byte
// is read.
//
// The mapping lives as long as the BundleFile; payloads handed out with
// payload() keep it alive (Payload::adopt). A bundle file must not be
// changed in place while it is mapped: a byte changed later is caught by the
// checks of a read (BundleStore), a file truncated under the mapping faults
// (SIGBUS), as FileStore's mapped reads document.
//
// Thread-safety: immutable after open(); every const method is thread-safe.
#pragma once

#include "kcache/bundle.hpp"
#include "kcache/payload.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
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
    std::uint64_t payload_offset = 0;
    std::uint64_t payload_size = 0;
    Passport passport;
  };

  // How the caller will read the payloads: `in_place` (the bundle tier: a
  // hit touches one payload, so only what is read is paged in) or `whole`
  // (verify, install: every payload is hashed, so the mapping is populated
  // in one go at open, MAP_POPULATE, instead of a page fault per page).
  enum class Reading { in_place, whole };

  // Maps and checks `path` (see above). Errors: see kcache/bundle.hpp.
  static Result<std::shared_ptr<const BundleFile>> open(const std::filesystem::path& path,
                                                        Reading reading = Reading::in_place);
  ~BundleFile();
  BundleFile(const BundleFile&) = delete;
  BundleFile& operator=(const BundleFile&) = delete;

  // Checks the trailer's signature against `trust`: `unsigned`,
  // `untrusted-key` or `bad-signature` refusals, or `unsupported` when
  // libcrypto cannot be loaded.
  Result<void> check_signature(const BundleTrust& trust) const;

  // Hashes payload `i` and compares it with its passport: `payload-mismatch`.
  Result<void> check_payload(std::size_t i) const;

  // The position of `key` in the index, found by binary search over the
  // mapped index records; nullopt when the bundle does not hold it.
  std::optional<std::size_t> find(const Key& key) const noexcept;

  const std::vector<Entry>& entries() const noexcept { return m_entries; }
  // The payload of entry `i`, sharing the mapping (no copy).
  Payload payload(std::size_t i) const;
  std::string_view payload_view(std::size_t i) const noexcept;

  BundleInfo info() const;
  const std::filesystem::path& path() const noexcept { return m_path; }
  std::uint64_t size() const noexcept { return m_size; }

private:
  BundleFile() = default;
  Result<void> check_structure();
  Result<void> check_digest();
  Result<void> read_passports();
  Error refused(std::string_view reason, const std::string& detail,
                ErrorCode code = ErrorCode::corrupt) const {
    return refusal(m_path, reason, detail, code);
  }

  std::filesystem::path m_path;
  const char* m_map = nullptr;
  std::uint64_t m_size = 0;
  std::uint64_t m_count = 0;
  std::uint64_t m_trailer = 0;
  std::vector<Entry> m_entries;
};

} // namespace kcache::bundle
