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
// Thread-safety: immutable after open(); every const method is thread-safe.
#pragma once

#include "kcache/bundle.hpp"
#include "kcache/payload.hpp"
#include "util/fd.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
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
  static Result<std::shared_ptr<const BundleFile>> open(const std::filesystem::path& path);
  ~BundleFile();
  BundleFile(const BundleFile&) = delete;
  BundleFile& operator=(const BundleFile&) = delete;

  // Checks the trailer's signature against `trust`: `unsigned`,
  // `untrusted-key` or `bad-signature` refusals, or `unsupported` when
  // libcrypto cannot be loaded.
  Result<void> check_signature(const BundleTrust& trust) const;

  // Hashes payload `i` (read from the file in chunks) and compares it with
  // its passport: `payload-mismatch`; `truncated` when the file shrank since
  // open(); an errno-based error when it cannot be read.
  Result<void> check_payload(std::size_t i) const;

  // Reads payload `i` from the file in chunks of at most k_chunk bytes into a
  // buffer of its own, hashes each chunk and only then hands it to `sink`;
  // after the last chunk compares the hash with the passport. Success: `sink`
  // received exactly the payload its passport names. `payload-mismatch`: the
  // bytes read do not match (changed in place since they were checked, or
  // never matched): what `sink` received must not be used. `truncated`, read
  // errors and `sink`'s own errors as for check_payload.
  Result<void> copy_payload(std::size_t i, const ChunkSink& sink) const;

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
  util::Fd m_fd;
  const char* m_map = nullptr;
  std::uint64_t m_size = 0;
  std::uint64_t m_count = 0;
  std::uint64_t m_trailer = 0;
  std::vector<Entry> m_entries;
};

} // namespace kcache::bundle
