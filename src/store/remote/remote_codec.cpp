// The remote object format: grammar in remote_codec.hpp and
// docs/remote-format.md. This file is its only writer and reader.
#include "store/remote/remote_codec.hpp"

#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "kcache/artifact_io.hpp"
#include "kcache/key_builder.hpp"
#include "kcache/passport.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"
#include "util/wire_codec.hpp"

namespace kcache::remote {

namespace {

constexpr std::string_view k_magic{"KCREMOTE", 8};
constexpr std::uint32_t k_flag_zstd = k_remote_flag_zstd;
constexpr std::uint32_t k_flag_signed = k_remote_flag_signed;
constexpr std::uint32_t k_known_flags = k_flag_zstd | k_flag_signed;

using Mac = std::array<unsigned char, k_remote_signature_bytes>;

Mac hmac(const TeamKey& key, std::string_view bytes) {
  const auto d = util::hmac_sha256(key.secret, bytes);
  Mac out{};
  static_assert(sizeof(out) == sizeof(d), "an HMAC-SHA256 is 32 bytes");
  std::memcpy(out.data(), d.data(), out.size());
  return out;
}

tl::unexpected<RejectedObject> reject(Rejection r, std::string message) {
  return tl::unexpected(RejectedObject{r, std::move(message)});
}

}  // namespace

std::string_view to_string(Rejection r) noexcept {
  switch (r) {
    case Rejection::too_large: return "too_large";
    case Rejection::malformed: return "malformed";
    case Rejection::wrong_key: return "wrong_key";
    case Rejection::unsigned_entry: return "unsigned";
    case Rejection::unknown_signer: return "unknown_signer";
    case Rejection::bad_signature: return "bad_signature";
    case Rejection::corrupt: return "corrupt";
  }
  return "unknown";
}

std::string object_name(const Key& key) { return "kcache:v1:" + key.hex(); }
std::string lease_name(const Key& key) { return "kcache:v1:lease:" + key.hex(); }

std::string encode_object_header(std::uint32_t flags, const Key& key, std::uint64_t stream_len, std::uint64_t body_len,
                                 const CodecOptions& options) {
  wire::Writer w;
  w.raw(k_magic);
  w.u32(k_remote_object_version);
  w.u32(flags);
  const auto& kb = key.bytes();
  w.raw(std::string_view(reinterpret_cast<const char*>(kb.data()), kb.size()));
  w.u64(stream_len);
  w.u64(body_len);
  if ((flags & k_flag_signed) != 0 && options.sign) {
    w.raw(std::string_view(reinterpret_cast<const char*>(options.sign->id.data()), options.sign->id.size()));
  } else {
    w.u64(0);
  }
  w.u64(0);  // reserved
  return w.take();
}

const TeamKey* find_signer(const CodecOptions& options, const char* id) {
  auto match = [&](const TeamKey& k) { return std::memcmp(k.id.data(), id, k.id.size()) == 0; };
  if (options.sign && match(*options.sign)) {
    return &*options.sign;
  }
  for (const TeamKey& k : options.read) {
    if (match(k)) {
      return &k;
    }
  }
  return nullptr;
}

bool worth_compressing(std::string_view sample, const CodecOptions& options) {
  std::string out(ZSTD_compressBound(sample.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), sample.data(), sample.size(), options.zstd_level);
  return ZSTD_isError(n) == 0U && n < sample.size() - sample.size() / 32;
}

std::string encode_object(const Artifact& artifact, const CodecOptions& options) {
  const std::string stream = encode_artifact(artifact);
  std::string body;
  std::uint32_t flags = 0;
  // A large stream whose first MiB does not compress (an engine's weights,
  // already-compressed data) is stored as it is without compressing it all:
  // that saves the time and a third copy of it in memory (a 300 MB engine
  // would otherwise be held as payload, stream, compressed attempt and object).
  constexpr std::size_t k_sample = std::size_t{1} << 20;
  const bool compressible = options.compression == Compression::zstd &&
                            (stream.size() <= 4 * k_sample ||
                             worth_compressing(std::string_view(stream).substr(0, k_sample), options));
  if (compressible) {
    body.resize(ZSTD_compressBound(stream.size()));
    const std::size_t n = ZSTD_compress(body.data(), body.size(), stream.data(), stream.size(), options.zstd_level);
    if (ZSTD_isError(n) == 0U && n < stream.size()) {
      body.resize(n);
      flags |= k_flag_zstd;
    } else {
      std::string().swap(body);  // incompressible (or a zstd failure): store it as it is
    }
  }
  const std::string_view payload = (flags & k_flag_zstd) != 0 ? std::string_view(body) : std::string_view(stream);
  if (options.sign) {
    flags |= k_flag_signed;
  }
  wire::Writer w;
  w.out().reserve(k_remote_header_bytes + payload.size() + k_remote_signature_bytes);
  w.raw(encode_object_header(flags, artifact.passport.key, stream.size(), payload.size(), options));
  w.raw(payload);
  if (options.sign) {
    const Mac mac = hmac(*options.sign, w.out());
    w.raw(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
  }
  return w.take();
}

tl::expected<ObjectHeader, RejectedObject> parse_object_header(std::string_view header, const Key& expected,
                                                               const CodecOptions& options,
                                                               std::optional<std::uint64_t> object_size) {
  const char* b = header.data();
  if (header.substr(0, k_magic.size()) != k_magic) {
    return reject(Rejection::malformed, "wrong magic (not a kcache remote object)");
  }
  const auto version = static_cast<std::uint32_t>(wire::load_le(b + 8, 4));
  if (version != k_remote_object_version) {
    return reject(Rejection::malformed, fmt::format("object format version {} is not supported (expected {})",
                                                    version, k_remote_object_version));
  }
  const auto flags = static_cast<std::uint32_t>(wire::load_le(b + 12, 4));
  if ((flags & ~k_known_flags) != 0) {
    return reject(Rejection::malformed, fmt::format("unknown flags {:#x}", flags));
  }
  if (std::memcmp(b + 16, expected.bytes().data(), Key::k_size) != 0) {
    return reject(Rejection::wrong_key, "the object was stored for another key (replayed under this name)");
  }
  ObjectHeader h;
  h.stream_len = wire::load_le(b + 48, 8);
  h.body_len = wire::load_le(b + 56, 8);
  h.compressed = (flags & k_flag_zstd) != 0;
  h.is_signed = (flags & k_flag_signed) != 0;
  const std::uint64_t sig_len = h.is_signed ? k_remote_signature_bytes : 0;
  if (!h.is_signed && wire::load_le(b + 64, 8) != 0) {
    return reject(Rejection::malformed, "an unsigned object names a signer");
  }
  if (wire::load_le(b + 72, 8) != 0) {
    return reject(Rejection::malformed, "reserved header bytes are not zero");
  }
  if (object_size) {
    const std::uint64_t size = *object_size;
    if (h.body_len > size - k_remote_header_bytes || size - k_remote_header_bytes - h.body_len != sig_len) {
      return reject(Rejection::malformed, fmt::format("object is {} bytes; its header announces {}", size,
                                                      k_remote_header_bytes + h.body_len + sig_len));
    }
  } else if (h.body_len > options.max_entry_size ||
             h.body_len + k_remote_header_bytes + sig_len > options.max_entry_size) {
    return reject(Rejection::too_large, fmt::format("object of {} bytes is larger than max_entry_size ({})",
                                                    h.body_len + k_remote_header_bytes + sig_len,
                                                    options.max_entry_size));
  }
  h.object_len = k_remote_header_bytes + h.body_len + sig_len;
  if (options.sign.has_value() || !options.read.empty()) {
    if (!h.is_signed) {
      return reject(Rejection::unsigned_entry, "the object is not signed and a team key is configured");
    }
    h.signer = find_signer(options, b + 64);
    if (h.signer == nullptr) {
      return reject(Rejection::unknown_signer,
                    "the object is signed with a team key this reader does not hold (key id " +
                        util::to_hex(reinterpret_cast<const std::uint8_t*>(b + 64), 8) + ")");
    }
  }
  return h;
}

tl::expected<void, RejectedObject> check_object_lengths(const ObjectHeader& header, const CodecOptions& options) {
  if (header.stream_len == 0 || header.stream_len > options.max_entry_size) {
    return reject(Rejection::too_large, fmt::format("artifact stream of {} bytes is out of bounds (max_entry_size {})",
                                                    header.stream_len, options.max_entry_size));
  }
  if (!header.compressed && header.body_len != header.stream_len) {
    return reject(Rejection::malformed, "uncompressed body length differs from the stream length");
  }
  return {};
}

tl::expected<Artifact, RejectedObject> decode_object(std::string_view bytes, const Key& expected,
                                                     const CodecOptions& options) {
  if (bytes.size() > options.max_entry_size) {
    return reject(Rejection::too_large, fmt::format("object of {} bytes is larger than max_entry_size ({})",
                                                    bytes.size(), options.max_entry_size));
  }
  if (bytes.size() < k_remote_header_bytes) {
    return reject(Rejection::malformed, fmt::format("object of {} bytes is shorter than its header", bytes.size()));
  }
  auto header = parse_object_header(bytes.substr(0, k_remote_header_bytes), expected, options, bytes.size());
  if (!header) {
    return tl::unexpected(std::move(header.error()));
  }
  if (header->signer != nullptr) {
    const std::size_t covered = bytes.size() - k_remote_signature_bytes;
    const Mac mac = hmac(*header->signer, bytes.substr(0, covered));
    if (!util::equal_constant_time(mac.data(), bytes.data() + covered, mac.size())) {
      return reject(Rejection::bad_signature, "the HMAC does not match: the object was changed after signing");
    }
  }
  if (auto lengths = check_object_lengths(*header, options); !lengths) {
    return tl::unexpected(std::move(lengths.error()));
  }
  const std::uint64_t stream_len = header->stream_len;
  const std::uint64_t body_len = header->body_len;
  const std::string_view body = bytes.substr(k_remote_header_bytes, body_len);
  std::string inflated;
  std::string_view stream = body;
  if (header->compressed) {
    const unsigned long long declared = ZSTD_getFrameContentSize(body.data(), body.size());
    if (declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR || declared != stream_len) {
      return reject(Rejection::malformed, "the zstd frame does not declare the announced size");
    }
    // Inflated as it comes, the output grown to what the frame really
    // yields: a small object that declares a large size (up to
    // max_entry_size) costs what it inflates to, not what it claims.
    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
    if (!dctx) {
      return reject(Rejection::malformed, "cannot inflate: no memory for a zstd context");
    }
    ZSTD_inBuffer in{body.data(), body.size(), 0};
    const std::uint64_t room = stream_len + 1;  // a byte more: a frame that inflates past the size shows it
    std::size_t produced = 0;
    std::size_t left = 1;
    while (left != 0) {
      if (produced == inflated.size()) {
        if (produced >= room) {
          return reject(Rejection::malformed, "zstd frame inflates past the announced size");
        }
        const std::uint64_t grow = std::max<std::uint64_t>(std::uint64_t{1} << 20, produced);
        inflated.resize(static_cast<std::size_t>(std::min<std::uint64_t>(room, produced + grow)));
      }
      ZSTD_outBuffer out{inflated.data() + produced, inflated.size() - produced, 0};
      left = ZSTD_decompressStream(dctx.get(), &out, &in);
      produced += out.pos;
      if (ZSTD_isError(left) != 0U) {
        return reject(Rejection::malformed, std::string("bad zstd frame: ") + ZSTD_getErrorName(left));
      }
      if (left != 0 && out.pos == 0 && in.pos == in.size) {
        return reject(Rejection::malformed, "zstd frame is truncated");
      }
    }
    if (produced != stream_len || in.pos != in.size) {
      return reject(Rejection::malformed, "zstd frame inflates to the wrong size");
    }
    inflated.resize(produced);
    stream = inflated;
  }
  auto artifact = decode_artifact(stream, options.max_entry_size);
  if (!artifact) {
    return reject(Rejection::corrupt, artifact.error().message);
  }
  if (auto ok = verify_object(*artifact, expected); !ok) {
    return reject(Rejection::wrong_key, ok.error().message);
  }
  return std::move(*artifact);
}

Result<void> verify_object(const Artifact& artifact, const Key& expected) {
  // The same identity check as every local read (the key recomputed from the
  // key record, the kind, a put entry's content digest): docs/passport.md.
  return check_entry_identity(expected, artifact.passport);
}

}  // namespace kcache::remote
