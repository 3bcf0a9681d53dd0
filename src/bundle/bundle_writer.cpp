// create_bundle: lays entries out as bundle_format.hpp says, hashing the
// metadata as it goes, and signs the digest.
#include "bundle/bundle_writer.hpp"

#include "bundle/bundle_format.hpp"
#include "bundle/bundle_keys.hpp"
#include "kcache/bundle.hpp"
#include "util/atomic_write.hpp"
#include "util/hex.hpp"
#include "util/posix_io.hpp"
#include "util/sha256.hpp"

#include <algorithm>
#include <fcntl.h>
#include <fmt/format.h>
#include <string>
#include <vector>

namespace kcache {

namespace {

using namespace bundle; // NOLINT(google-build-using-namespace): the format's constants

struct Placed {
  const Artifact* artifact = nullptr;
  std::string passport;
  std::uint64_t passport_offset = 0;
  std::uint64_t payload_offset = 0;
};

// Writes bytes to `fd`, feeding metadata (not payloads) to the digest.
class Sink {
public:
  Sink(int fd, std::string_view name, util::Sha256& digest) : m_fd(fd), m_name(name), m_digest(digest) {}

  Result<void> metadata(std::string_view bytes) {
    m_digest.update(bytes);
    return raw(bytes);
  }
  Result<void> zeros(std::uint64_t count) {
    static const std::string k_zeros(k_alignment, '\0');
    while (count > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(count, k_zeros.size()));
      if (auto r = metadata(std::string_view(k_zeros).substr(0, n)); !r) {
        return r;
      }
      count -= n;
    }
    return {};
  }
  Result<void> raw(std::string_view bytes) {
    if (const int e = util::io::write_all(m_fd, bytes); e != 0) {
      return make_errno_error(e, fmt::format("cannot write {}", m_name));
    }
    m_written += bytes.size();
    return {};
  }
  std::uint64_t written() const { return m_written; }

private:
  int m_fd;
  std::string_view m_name;
  util::Sha256& m_digest;
  std::uint64_t m_written = 0;
};

} // namespace

namespace bundle {

Result<BundleSummary> write_bundle(std::vector<Artifact> artifacts, const BundleCreateOptions& options,
                                   std::string_view out_name,
                                   const std::function<Result<void>(const BundleBytes& bytes)>& output) {
  std::optional<PrivateKey> signer;
  if (!options.sign_key_file.empty()) {
    auto key = read_private_key(options.sign_key_file);
    if (!key) {
      return tl::unexpected(key.error());
    }
    signer = std::move(*key);
  }
  std::sort(artifacts.begin(), artifacts.end(),
            [](const Artifact& a, const Artifact& b) { return a.passport.key < b.passport.key; });
  artifacts.erase(std::unique(artifacts.begin(), artifacts.end(),
                              [](const Artifact& a, const Artifact& b) {
                                return a.passport.key == b.passport.key;
                              }),
                  artifacts.end());
  // Lay the entries out first: the index, which comes before them, holds their offsets.
  std::vector<Placed> placed;
  placed.reserve(artifacts.size());
  std::uint64_t at = k_header_size + k_record_size * artifacts.size();
  BundleSummary summary;
  for (const Artifact& a : artifacts) {
    if (auto ok = a.verify(); !ok) {
      return make_error(ErrorCode::corrupt,
                        fmt::format("entry {} does not verify, so it cannot go into a bundle: {}",
                                    a.passport.key.hex(), ok.error().message));
    }
    Placed p;
    p.artifact = &a;
    p.passport = a.passport.to_json();
    p.passport_offset = at;
    p.payload_offset = payload_start(at + p.passport.size());
    at = next_entry_start(p.payload_offset + a.payload.size());
    summary.payload_bytes += a.payload.size();
    placed.push_back(std::move(p));
  }
  const std::uint64_t trailer_offset = at;
  const std::uint64_t file_size = trailer_offset + k_trailer_size;

  std::string header(k_header_size, '\0');
  header.replace(0, k_magic.size(), k_magic);
  store_u32(header.data() + k_header_version, k_bundle_format_version);
  store_u32(header.data() + k_header_alignment, k_alignment);
  store_u64(header.data() + k_header_count, placed.size());
  store_u64(header.data() + k_header_index_offset, k_header_size);
  store_u64(header.data() + k_header_file_size, file_size);
  store_u64(header.data() + k_header_trailer_offset, trailer_offset);
  std::string index(k_record_size * placed.size(), '\0');
  for (std::size_t i = 0; i < placed.size(); ++i) {
    char* r = index.data() + i * k_record_size;
    const auto& key = placed[i].artifact->passport.key.bytes();
    std::copy(key.begin(), key.end(), r);
    store_u64(r + k_record_passport_offset, placed[i].passport_offset);
    store_u64(r + k_record_passport_size, placed[i].passport.size());
    store_u64(r + k_record_payload_offset, placed[i].payload_offset);
    store_u64(r + k_record_payload_size, placed[i].artifact->payload.size());
  }

  const auto write = [&](int fd) -> Result<void> {
    util::Sha256 digest;
    Sink out(fd, out_name, digest);
    if (auto r = out.metadata(header); !r) {
      return r;
    }
    if (auto r = out.metadata(index); !r) {
      return r;
    }
    for (const Placed& p : placed) {
      if (auto r = out.metadata(p.passport); !r) {
        return r;
      }
      if (auto r = out.zeros(p.payload_offset - out.written()); !r) {
        return r;
      }
      if (auto r = out.raw(p.artifact->payload.view()); !r) {
        return r;
      }
      if (auto r = out.zeros(next_entry_start(out.written()) - out.written()); !r) {
        return r;
      }
    }
    const util::Digest256 d = digest.finish();
    summary.digest_hex = util::to_hex(d.data(), d.size());
    std::string trailer(k_trailer_size, '\0');
    trailer.replace(0, k_trailer_magic.size(), k_trailer_magic);
    std::copy(d.begin(), d.end(), trailer.data() + k_trailer_digest);
    if (signer) {
      std::string message(k_signed_prefix);
      message.append(reinterpret_cast<const char*>(d.data()), d.size());
      auto sig = ed25519_sign(signer->seed, message);
      if (!sig) {
        return tl::unexpected(sig.error());
      }
      store_u32(trailer.data() + k_trailer_scheme, k_scheme_ed25519);
      std::copy(signer->public_key.bytes.begin(), signer->public_key.bytes.end(),
                trailer.data() + k_trailer_public_key);
      std::copy(sig->begin(), sig->end(), trailer.data() + k_trailer_signature);
      summary.signer_id = signer->public_key.id();
    }
    return out.raw(trailer);
  };
  if (auto w = output(write); !w) {
    return tl::unexpected(w.error());
  }
  summary.entries = placed.size();
  summary.file_bytes = file_size;
  return summary;
}

Result<BundleSummary> write_bundle_to(int fd, std::string_view out_name, std::vector<Artifact> artifacts,
                                      const BundleCreateOptions& options) {
  return write_bundle(std::move(artifacts), options, out_name,
                      [fd](const BundleBytes& bytes) { return bytes(fd); });
}

} // namespace bundle

Result<BundleSummary> create_bundle(const std::filesystem::path& path,
                                    std::vector<Artifact> artifacts,
                                    const BundleCreateOptions& options) {
  // Written as every output a user names is (util::write_output_file_with):
  // a regular file or a missing path is replaced atomically (fsynced first:
  // a bundle is often shipped at once); a device, FIFO or symlink's target is
  // written in place, never replaced; a directory is refused.
  return bundle::write_bundle(std::move(artifacts), options, path.string(), [&](const bundle::BundleBytes& bytes) {
    return util::write_output_file_with(path, bytes, 0644, util::FileSync::fsync);
  });
}

} // namespace kcache
