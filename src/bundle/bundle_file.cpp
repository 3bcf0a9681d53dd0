// BundleFile: maps a bundle and checks it, step by step (bundle_file.hpp).
#include "bundle/bundle_file.hpp"

#include "bundle/bundle_format.hpp"
#include "bundle/bundle_keys.hpp"
#include "bundle/ed25519.hpp"
#include "util/fd.hpp"
#include "util/hex.hpp"
#include "util/input_file.hpp"
#include "util/sha256.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <memory>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

namespace kcache::bundle {

Error refusal(const std::filesystem::path& file, std::string_view reason, const std::string& detail,
              ErrorCode code) {
  return Error{code, fmt::format("bundle {} refused ({}): {}", file.string(), reason, detail), {}};
}

namespace {

bool all_zero(const char* p, std::uint64_t n) {
  return std::all_of(p, p + n, [](char c) { return c == '\0'; });
}

} // namespace

BundleFile::~BundleFile() {
  if (m_map != nullptr) {
    ::munmap(const_cast<char*>(m_map),
             m_size); // NOLINT(cppcoreguidelines-pro-type-const-cast): our own mapping
  }
}

Result<std::shared_ptr<const BundleFile>> BundleFile::open(const std::filesystem::path& path,
                                                          const BundleVerdicts* verdicts) {
  auto input = util::open_input_file(path, "bundle");
  if (!input) {
    return tl::unexpected(input.error());
  }
  std::shared_ptr<BundleFile> file(new BundleFile()); // NOLINT: private constructor
  file->m_path = path;
  file->m_fd = std::move(input->fd);
  file->m_size = static_cast<std::uint64_t>(input->st.st_size);
  if (file->m_size < k_header_size + k_trailer_size) {
    return tl::unexpected(file->refused(
        "truncated", fmt::format("{} bytes is shorter than a header and a trailer ({} bytes)",
                                 file->m_size, k_header_size + k_trailer_size)));
  }
  // Not populated: only the pages the checks read (the metadata) and, in the
  // bundle tier, the payloads of hits are ever paged in.
  void* map = ::mmap(nullptr, file->m_size, PROT_READ, MAP_PRIVATE, file->m_fd.get(), 0);
  if (map == MAP_FAILED) {
    return make_errno_error(errno, "map bundle " + path.string());
  }
  file->m_map = static_cast<const char*>(map);
  if (auto ok = file->check_header(); !ok) {
    return tl::unexpected(ok.error());
  }
  const char* t = file->m_map + file->m_trailer;
  file->m_stat = input->st;
  file->m_seal = BundleSeal::of(
      input->st, util::to_hex(reinterpret_cast<const std::uint8_t*>(t + k_trailer_digest), 128));
  if (verdicts != nullptr && verdicts->holds(file->m_seal)) {
    file->m_remembered = true;
    return std::shared_ptr<const BundleFile>(std::move(file));
  }
  for (auto step :
       {&BundleFile::check_records, &BundleFile::check_digest, &BundleFile::read_passports}) {
    if (auto ok = (file.get()->*step)(); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  return std::shared_ptr<const BundleFile>(std::move(file));
}

Result<void> BundleFile::check_header() {
  const char* h = m_map;
  if (std::string_view(h, k_magic.size()) != k_magic) {
    return tl::unexpected(
        refused("bad-header", "it does not start with \"KCBUNDLE\": not a kcache bundle"));
  }
  if (const std::uint32_t v = load_u32(h + k_header_version); v != k_bundle_format_version) {
    return tl::unexpected(refused(
        "bad-header",
        fmt::format("format version {} (this kcache reads version {}{})", v,
                    k_bundle_format_version, v > k_bundle_format_version ? "; upgrade kcache" : ""),
        v > k_bundle_format_version ? ErrorCode::unsupported : ErrorCode::corrupt));
  }
  const std::uint64_t declared = load_u64(h + k_header_file_size);
  if (declared > m_size) {
    return tl::unexpected(refused(
        "truncated", fmt::format("the file has {} bytes, its header says {}", m_size, declared)));
  }
  if (declared < m_size) {
    return tl::unexpected(
        refused("trailing-bytes", fmt::format("{} bytes follow the trailer", m_size - declared)));
  }
  m_count = load_u64(h + k_header_count);
  m_trailer = load_u64(h + k_header_trailer_offset);
  // Every entry takes a 64-byte record, and its payload a 4096-aligned block
  // of its own (a payload starts strictly after the previous entry's pad1,
  // at a multiple of the alignment), all between the header and the trailer:
  // a count the file cannot hold is refused before anything is allocated.
  const std::uint64_t most_entries =
      (m_size - k_header_size - k_trailer_size + k_alignment) / (k_record_size + k_alignment);
  if (load_u32(h + k_header_alignment) != k_alignment ||
      load_u64(h + k_header_index_offset) != k_header_size ||
      m_trailer != m_size - k_trailer_size || !all_zero(h + 48, 16) || m_count > most_entries) {
    return tl::unexpected(
        refused("bad-header", m_count > most_entries
                                  ? fmt::format("its header claims {} entries, more than its {} bytes can hold",
                                                m_count, m_size)
                                  : std::string("its header fields are not those of a version 1 bundle")));
  }
  const char* t = m_map + m_trailer;
  if (std::string_view(t, k_trailer_magic.size()) != k_trailer_magic) {
    return tl::unexpected(
        refused("bad-header", "no trailer (\"KCBSIGN1\") where the header says it is"));
  }
  const std::uint32_t scheme = load_u32(t + k_trailer_scheme);
  if ((scheme != k_scheme_none && scheme != k_scheme_ed25519) || !all_zero(t + 12, 4) ||
      (scheme == k_scheme_none && !all_zero(t + k_trailer_public_key, 96))) {
    return tl::unexpected(refused("bad-header", "its trailer is not that of a version 1 bundle"));
  }
  return {};
}

Result<void> BundleFile::check_records() {
  // The index: strictly ascending keys, and each entry exactly where the
  // writer puts it (one encoding per set of entries). Every record is
  // checked before the entries are allocated.
  const auto record = [&](std::uint64_t i) { return m_map + k_header_size + i * k_record_size; };
  std::uint64_t at = k_header_size + k_record_size * m_count;
  for (std::uint64_t i = 0; i < m_count; ++i) {
    const char* r = record(i);
    if (at > m_trailer) {
      return tl::unexpected(
          refused("bad-index", fmt::format("record {} starts after the trailer", i)));
    }
    if (i > 0 && std::memcmp(record(i - 1), r, Key::k_size) >= 0) {
      return tl::unexpected(
          refused("bad-index", fmt::format("record {} is not in ascending key order", i)));
    }
    if (load_u64(r + k_record_passport_offset) != at) {
      return tl::unexpected(refused(
          "bad-index", fmt::format("record {} does not describe the entry that follows the one before it", i)));
    }
    auto e = read_record(i, false);
    if (!e) {
      return tl::unexpected(e.error());
    }
    at = next_entry_start(e->payload_offset + e->payload_size);
  }
  if (at != m_trailer) {
    return tl::unexpected(
        refused("bad-index", fmt::format("the entries end at byte {}, the trailer starts at {}", at,
                                         m_trailer)));
  }
  // The index describes the layout exactly: now the entries, and the padding
  // the layout leaves must be zero.
  m_entries.reserve(m_count);
  for (std::uint64_t i = 0; i < m_count; ++i) {
    auto e = read_record(i, true);
    if (!e) {
      return tl::unexpected(e.error());
    }
    m_entries.push_back(std::move(*e));
  }
  return {};
}

Result<BundleFile::Entry> BundleFile::read_record(std::uint64_t i, bool padding) const {
  const char* r = m_map + k_header_size + i * k_record_size;
  Entry e;
  Key::Bytes kb{};
  std::memcpy(kb.data(), r, kb.size());
  e.key = Key(kb);
  e.passport_offset = load_u64(r + k_record_passport_offset);
  e.passport_size = load_u64(r + k_record_passport_size);
  e.payload_offset = load_u64(r + k_record_payload_offset);
  e.payload_size = load_u64(r + k_record_payload_size);
  const std::uint64_t first = k_header_size + k_record_size * m_count;
  if (e.passport_offset < first || e.passport_offset > m_trailer || e.passport_size == 0 ||
      e.passport_size > k_passport_max_bytes || e.passport_size > m_trailer - e.passport_offset ||
      e.payload_offset != payload_start(e.passport_offset + e.passport_size) || e.payload_offset > m_trailer ||
      e.payload_size >= m_trailer - e.payload_offset ||
      next_entry_start(e.payload_offset + e.payload_size) > m_trailer) {
    return tl::unexpected(refused(
        "bad-index", fmt::format("record {} ({}) does not describe the entry that follows "
                                 "the one before it",
                                 i, e.key.hex())));
  }
  if (!padding) {
    return e;
  }
  const std::uint64_t passport_end = e.passport_offset + e.passport_size;
  const std::uint64_t payload_end = e.payload_offset + e.payload_size;
  if (!all_zero(m_map + passport_end, e.payload_offset - passport_end) ||
      !all_zero(m_map + payload_end, next_entry_start(payload_end) - payload_end)) {
    return tl::unexpected(refused(
        "bad-entry", fmt::format("the padding around entry {} is not zero", e.key.hex())));
  }
  return e;
}

Result<void> BundleFile::check_digest() {
  util::Sha256 digest;
  std::uint64_t at = 0;
  for (const Entry& e : m_entries) {
    digest.update(m_map + at, e.payload_offset - at);
    at = e.payload_offset + e.payload_size;
  }
  digest.update(m_map + at, m_trailer - at);
  const util::Digest256 d = digest.finish();
  if (!util::equal_constant_time(d.data(), m_map + m_trailer + k_trailer_digest, d.size())) {
    return tl::unexpected(refused("digest-mismatch",
                                  "its header, index, passports or padding changed after it was "
                                  "written (the digest in its trailer does not match)"));
  }
  return {};
}

Result<void> BundleFile::read_passports() {
  for (Entry& e : m_entries) {
    if (auto ok = read_passport(e, true); !ok) {
      return ok;
    }
  }
  return {};
}

Result<void> BundleFile::read_passport(Entry& e, bool canonical) const {
  const std::string_view text(m_map + e.passport_offset, e.passport_size);
  auto passport = Passport::from_json(text);
  if (!passport) {
    return tl::unexpected(
        refused("entry-mismatch", fmt::format("the passport of entry {} does not parse: {}",
                                              e.key.hex(), passport.error().message)));
  }
  // One set of entries, one encoding: the passport must be exactly the
  // bytes `bundle create` writes for it (Passport::to_json: compact,
  // members in order, no byte before or after), not merely parse to it.
  if (canonical && passport->to_json() != text) {
    return tl::unexpected(refused(
        "entry-mismatch",
        fmt::format("the passport of entry {} is not in its one encoding (the compact JSON "
                    "`bundle create` writes: no other spacing, member order, escapes or bytes "
                    "after it)",
                    e.key.hex())));
  }
  if (auto ok = check_entry_identity(e.key, *passport); !ok) {
    return tl::unexpected(
        refused("entry-mismatch", fmt::format("entry {} does not match its key: {}", e.key.hex(),
                                              ok.error().message)));
  }
  if (passport->payload_size != e.payload_size) {
    return tl::unexpected(refused(
        "entry-mismatch", fmt::format("entry {} holds {} payload bytes, its passport says {}",
                                      e.key.hex(), e.payload_size, passport->payload_size)));
  }
  e.passport = std::move(*passport);
  return {};
}

Result<const BundleFile::Entry*> BundleFile::entry(std::size_t i) const {
  if (!m_remembered) {
    return &m_entries[i];
  }
  const std::lock_guard lock(m_lazy_mutex);
  if (const auto it = m_lazy.find(i); it != m_lazy.end()) {
    return it->second.get();
  }
  auto e = read_record(i, true);
  if (!e) {
    return tl::unexpected(e.error());
  }
  // The encoding is not a safety property (parse, key and size are): the
  // full check that made the verdict saw it.
  if (auto ok = read_passport(*e, false); !ok) {
    return tl::unexpected(ok.error());
  }
  auto& slot = m_lazy[i];
  slot = std::make_unique<Entry>(std::move(*e));
  return slot.get();
}

Result<void> BundleFile::check_signature(const BundleTrust& trust) const {
  const char* t = m_map + m_trailer;
  if (load_u32(t + k_trailer_scheme) == k_scheme_none) {
    return tl::unexpected(refused(
        "unsigned", "it carries no signature (create it with `kcache bundle create --sign KEY`)",
        ErrorCode::permission_denied));
  }
  Ed25519PublicKey key{};
  std::memcpy(key.data(), t + k_trailer_public_key, key.size());
  const auto trusted = std::find_if(trust.keys.begin(), trust.keys.end(),
                                    [&](const BundlePublicKey& k) { return k.bytes == key; });
  if (trusted == trust.keys.end()) {
    return tl::unexpected(refused(
        "untrusted-key",
        fmt::format(
            "it is signed by key {}, which is not trusted here ({}); add its public key file to "
            "bundle_trusted_keys (KCACHE_BUNDLE_TRUSTED_KEYS) or pass --trust FILE",
            key_id(key),
            trust.keys.empty()      ? std::string("no key is trusted")
            : trust.keys.size() == 1 ? fmt::format("only key {} is", trust.keys.front().id())
                                     : fmt::format("{} other keys are", trust.keys.size())),
        ErrorCode::permission_denied));
  }
  if (m_remembered) {
    return {};  // this file's signature verified before it was remembered (bundle_verdicts.hpp)
  }
  Ed25519Signature sig{};
  std::memcpy(sig.data(), t + k_trailer_signature, sig.size());
  std::string message(k_signed_prefix);
  message.append(t + k_trailer_digest, 32);
  auto ok = ed25519_verify(key, message, sig);
  if (!ok) {
    return tl::unexpected(ok.error());
  }
  if (!*ok) {
    return tl::unexpected(
        refused("bad-signature", fmt::format("its signature does not verify under key {} ({})",
                                             key_id(key), trusted->source)));
  }
  return {};
}

Result<void> BundleFile::check_payload(const Entry& e) const {
  return copy_payload(e, {});
}

Result<void> BundleFile::copy_payload(const Entry& e, const ChunkSink& sink) const {
  util::Sha256 sha;
  const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(e.payload_size, k_chunk));
  auto buffer = std::make_unique_for_overwrite<char[]>(std::max<std::size_t>(chunk, 1));
  for (std::uint64_t done = 0; done < e.payload_size;) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, e.payload_size - done));
    const ssize_t n =
        ::pread(m_fd.get(), buffer.get(), want, static_cast<off_t>(e.payload_offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return make_errno_error(errno, fmt::format("cannot read bundle {}", m_path.string()));
    }
    if (n == 0) {
      struct stat st {};
      const std::uint64_t now = ::fstat(m_fd.get(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
      return tl::unexpected(refused(
          "truncated",
          fmt::format("it shrank from {} to {} bytes while entry {} was read: it was truncated or "
                      "overwritten in place (replace a bundle with a new file and `mv`, never in place)",
                      m_size, now, e.key.hex())));
    }
    const std::string_view bytes(buffer.get(), static_cast<std::size_t>(n));
    sha.update(bytes);
    if (sink) {
      if (auto ok = sink(bytes); !ok) {
        return ok;
      }
    }
    done += static_cast<std::uint64_t>(n);
  }
  const util::Digest256 d = sha.finish();
  if (util::to_hex(d.data(), d.size()) != e.passport.payload_sha256) {
    return tl::unexpected(refused(
        "payload-mismatch",
        fmt::format("the payload of entry {} does not match the SHA-256 in its passport{}", e.key.hex(),
                    sink ? " (it was read just now: was the bundle changed in place while it was in use?)"
                         : "")));
  }
  return {};
}

std::optional<std::size_t> BundleFile::find(const Key& key) const noexcept {
  std::size_t lo = 0;
  std::size_t hi = m_count;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const int c =
        std::memcmp(m_map + k_header_size + mid * k_record_size, key.bytes().data(), Key::k_size);
    if (c == 0) {
      return mid;
    }
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return std::nullopt;
}

std::string_view BundleFile::payload_view(const Entry& e) const noexcept {
  return {m_map + e.payload_offset, e.payload_size};
}

Payload BundleFile::payload(const Entry& e) const {
  // The byte after every payload is a zero of pad1 (checked with its record): the NUL Payload promises.
  return Payload::adopt(shared_from_this(), payload_view(e));
}

BundleInfo BundleFile::info() const {
  BundleInfo info;
  info.file = m_path;
  info.file_bytes = m_size;
  const char* t = m_map + m_trailer;
  info.digest_hex = util::to_hex(reinterpret_cast<const std::uint8_t*>(t + k_trailer_digest), 32);
  info.is_signed = load_u32(t + k_trailer_scheme) == k_scheme_ed25519;
  if (info.is_signed) {
    Ed25519PublicKey key{};
    std::memcpy(key.data(), t + k_trailer_public_key, key.size());
    info.signer_id = key_id(key);
  }
  for (const Entry& e : m_entries) {
    info.payload_bytes += e.payload_size;
    info.entries.push_back(BundleEntryInfo{e.key, e.passport});
  }
  return info;
}

} // namespace kcache::bundle
