// The remote object format written and read in parts: see object_stream.hpp,
// remote_codec.hpp (the grammar) and docs/remote-format.md.
#include "store/remote/object_stream.hpp"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "kcache/artifact_io.hpp"
#include "util/hex.hpp"
#include "util/sha256.hpp"
#include "util/wire_codec.hpp"

namespace kcache::remote {

namespace {

constexpr std::size_t k_sample_bytes = std::size_t{1} << 20;  // as encode_object samples
// The largest zstd window a streamed object may ask for: kcache's own levels
// stay far below; a hostile frame asking more is refused, not allocated.
constexpr int k_max_window_log = 24;

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

// The artifact stream (docs/artifact-format.md) of a passport and a payload
// read in parts, produced in order: header, passport, payload, XXH3 trailer.
class StreamProducer {
 public:
  StreamProducer(const std::string& head, std::uint64_t payload_size, const PayloadReadAt& read_payload)
      : m_head(head), m_payload_size(payload_size), m_read(read_payload) {}

  std::uint64_t size() const noexcept { return m_head.size() + m_payload_size + k_artifact_stream_trailer_bytes; }

  Result<std::size_t> read(char* out, std::size_t n) {
    const std::uint64_t head_end = m_head.size();
    const std::uint64_t payload_end = head_end + m_payload_size;
    if (m_pos < head_end) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, head_end - m_pos));
      std::memcpy(out, m_head.data() + m_pos, k);
      return advance(out, k, true);
    }
    if (m_pos < payload_end) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, payload_end - m_pos));
      if (auto r = m_read(m_pos - head_end, out, k); !r) {
        return tl::unexpected(r.error());
      }
      return advance(out, k, true);
    }
    if (m_pos == payload_end) {
      wire::Writer w;
      w.u64(m_xxh.digest());
      std::memcpy(m_trailer, w.out().data(), sizeof m_trailer);
    }
    const std::uint64_t end = size();
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, end - m_pos));
    std::memcpy(out, m_trailer + (m_pos - payload_end), k);
    return advance(out, k, false);
  }

 private:
  std::size_t advance(const char* bytes, std::size_t k, bool hashed) {
    if (hashed) {
      m_xxh.update(bytes, k);
    }
    m_pos += k;
    return k;
  }

  const std::string& m_head;
  std::uint64_t m_payload_size;
  const PayloadReadAt& m_read;
  std::uint64_t m_pos = 0;
  util::Xxh3 m_xxh;
  char m_trailer[k_artifact_stream_trailer_bytes] = {};
};

// One zstd frame (declaring its content size) of a StreamProducer's bytes.
class Deflater {
 public:
  Deflater(StreamProducer& in, int level) : m_in(in), m_cctx(ZSTD_createCCtx()) {
    ZSTD_CCtx_setParameter(m_cctx.get(), ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setPledgedSrcSize(m_cctx.get(), in.size());
    m_inbuf.resize(ZSTD_CStreamInSize());
    m_outbuf.resize(ZSTD_CStreamOutSize());
  }

  Result<std::size_t> read(char* out, std::size_t n) {
    while (m_out_pos == m_out_len) {
      if (m_frame_done) {
        return 0;
      }
      if (m_in_pos == m_in_len && !m_input_done) {
        auto got = m_in.read(m_inbuf.data(), m_inbuf.size());
        if (!got) {
          return tl::unexpected(got.error());
        }
        m_in_len = *got;
        m_in_pos = 0;
        m_input_done = *got == 0;
      }
      ZSTD_inBuffer ib{m_inbuf.data(), m_in_len, m_in_pos};
      ZSTD_outBuffer ob{m_outbuf.data(), m_outbuf.size(), 0};
      const std::size_t left = ZSTD_compressStream2(m_cctx.get(), &ob, &ib, m_input_done ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(left) != 0U) {
        return make_error(ErrorCode::io, std::string("zstd compression failed: ") + ZSTD_getErrorName(left));
      }
      m_in_pos = ib.pos;
      m_out_len = ob.pos;
      m_out_pos = 0;
      m_frame_done = m_input_done && left == 0;
    }
    const std::size_t k = std::min(n, m_out_len - m_out_pos);
    std::memcpy(out, m_outbuf.data() + m_out_pos, k);
    m_out_pos += k;
    return k;
  }

 private:
  StreamProducer& m_in;
  std::unique_ptr<ZSTD_CCtx, CctxFree> m_cctx;
  std::vector<char> m_inbuf, m_outbuf;
  std::size_t m_in_pos = 0, m_in_len = 0, m_out_pos = 0, m_out_len = 0;
  bool m_input_done = false, m_frame_done = false;
};

tl::unexpected<RejectedObject> reject(Rejection r, std::string message) {
  return tl::unexpected(RejectedObject{r, std::move(message)});
}

}  // namespace

// ------------------------------------------------------------------ encoder

struct ObjectEncoder::Impl {
  CodecOptions options;
  Key key;
  std::string stream_head;  // artifact header + passport JSON
  std::uint64_t payload_size = 0;
  PayloadReadAt read_payload;
  bool compressed = false;
  std::uint64_t body_len = 0;
  std::string object_head;  // the 80-byte object header

  // The body being produced, and where the object is.
  std::unique_ptr<StreamProducer> producer;
  std::unique_ptr<Deflater> deflater;
  std::optional<util::HmacSha256> hmac;
  std::uint64_t pos = 0;
  std::uint64_t body_done = 0;
  util::Digest256 mac{};

  std::uint64_t size() const noexcept {
    return k_remote_header_bytes + body_len + (options.sign ? k_remote_signature_bytes : 0);
  }

  void start() {
    producer = std::make_unique<StreamProducer>(stream_head, payload_size, read_payload);
    deflater = compressed ? std::make_unique<Deflater>(*producer, options.zstd_level) : nullptr;
    hmac.reset();
    if (options.sign) {
      hmac.emplace(options.sign->secret);
      hmac->update(object_head);
    }
    pos = 0;
    body_done = 0;
  }

  Result<std::size_t> body_read(char* out, std::size_t n) {
    return deflater ? deflater->read(out, n) : producer->read(out, n);
  }
};

ObjectEncoder::ObjectEncoder(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ObjectEncoder::~ObjectEncoder() = default;

Result<std::unique_ptr<ObjectEncoder>> ObjectEncoder::make(const Passport& passport, PayloadReadAt read_payload,
                                                           const CodecOptions& options) {
  auto m = std::make_unique<Impl>();
  m->options = options;
  m->key = passport.key;
  const std::string json = passport.to_json();
  m->stream_head = encode_artifact_header(static_cast<std::uint32_t>(json.size()), passport.payload_size) + json;
  m->payload_size = passport.payload_size;
  m->read_payload = std::move(read_payload);
  const std::uint64_t stream_len = m->stream_head.size() + m->payload_size + k_artifact_stream_trailer_bytes;
  m->body_len = stream_len;
  if (options.compression == Compression::zstd) {
    // The first MiB decides, as for encode_object; then a counting pass.
    StreamProducer sample_in(m->stream_head, m->payload_size, m->read_payload);
    std::string sample(static_cast<std::size_t>(std::min<std::uint64_t>(k_sample_bytes, stream_len)), '\0');
    for (std::size_t at = 0; at < sample.size();) {
      auto n = sample_in.read(sample.data() + at, sample.size() - at);
      if (!n) {
        return tl::unexpected(n.error());
      }
      at += *n;
    }
    if (stream_len <= 4 * k_sample_bytes || worth_compressing(sample, options)) {
      StreamProducer in(m->stream_head, m->payload_size, m->read_payload);
      Deflater counting(in, options.zstd_level);
      std::vector<char> scratch(ZSTD_CStreamOutSize());
      std::uint64_t total = 0;
      for (;;) {
        auto n = counting.read(scratch.data(), scratch.size());
        if (!n) {
          return tl::unexpected(n.error());
        }
        if (*n == 0) {
          break;
        }
        total += *n;
      }
      if (total < stream_len) {
        m->compressed = true;
        m->body_len = total;
      }
    }
  }
  const std::uint32_t flags =
      (m->compressed ? k_remote_flag_zstd : 0U) | (options.sign ? k_remote_flag_signed : 0U);
  m->object_head = encode_object_header(flags, m->key, stream_len, m->body_len, options);
  m->start();
  return std::unique_ptr<ObjectEncoder>(new ObjectEncoder(std::move(m)));
}

std::uint64_t ObjectEncoder::size() const noexcept { return m_impl->size(); }

Result<void> ObjectEncoder::rewind() {
  m_impl->start();
  return {};
}

Result<std::size_t> ObjectEncoder::read(char* out, std::size_t n) {
  Impl& m = *m_impl;
  const std::uint64_t head_end = k_remote_header_bytes;
  const std::uint64_t body_end = head_end + m.body_len;
  if (n == 0 || m.pos >= m.size()) {
    return 0;
  }
  if (m.pos < head_end) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, head_end - m.pos));
    std::memcpy(out, m.object_head.data() + m.pos, k);
    m.pos += k;
    return k;
  }
  if (m.pos < body_end) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, body_end - m.pos));
    auto k = m.body_read(out, want);
    if (!k) {
      return tl::unexpected(k.error());
    }
    if (*k == 0) {
      return make_error(ErrorCode::io, "the entry changed while it was uploaded (its body ended early)");
    }
    if (m.hmac) {
      m.hmac->update(out, *k);
    }
    m.pos += *k;
    if (m.pos == body_end && m.hmac) {
      m.mac = m.hmac->finish();
    }
    return *k;
  }
  const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, m.size() - m.pos));
  std::memcpy(out, m.mac.data() + (m.pos - body_end), k);
  m.pos += k;
  return k;
}

// ------------------------------------------------------------------ decoder

struct ObjectDecoder::Impl {
  Key expected;
  const CodecOptions* options = nullptr;
  PayloadWrite write_payload;

  enum class Phase { header, body, signature, done };
  Phase phase = Phase::header;
  std::string header;  // the 80 object header bytes, then the signature
  std::string signature;
  std::uint64_t received = 0;
  std::uint64_t total = 0;  // header + body + signature, once the header is read
  std::uint64_t body_len = 0;
  std::uint64_t body_seen = 0;
  std::uint64_t stream_len = 0;
  bool compressed = false;
  const TeamKey* signer = nullptr;  // set when the signature is checked
  std::optional<util::HmacSha256> hmac;
  std::optional<RejectedObject> rejected;  // the first failed check
  bool stopped = false;                    // nothing more is decoded
  std::optional<Error> sink_error;

  // zstd
  std::unique_ptr<ZSTD_DCtx, DctxFree> dctx;
  std::string frame_start;  // the body's first bytes until the frame header can be read
  bool frame_checked = false;
  bool frame_ended = false;
  std::vector<char> inflated;
  std::uint64_t stream_seen = 0;

  // The artifact stream.
  std::string stream_header;   // 24 bytes
  std::string passport_json;   // passport_len bytes
  std::string trailer;         // 8 bytes
  ArtifactStreamHeader art;
  bool art_parsed = false;
  std::uint64_t payload_seen = 0;
  util::Sha256 sha;
  util::Xxh3 xxh;

  // Records the first failed check; the decoding of the body stops.
  bool fail(Rejection r, std::string message) {
    if (!rejected) {
      rejected = RejectedObject{r, std::move(message)};
    }
    stopped = true;
    // A signed object goes on being read (and hashed) to its end, so that a
    // damaged one is refused for its signature first, as decode_object does.
    return hmac.has_value();
  }

  bool fail(RejectedObject rejection) { return fail(rejection.reason, std::move(rejection.message)); }

  bool parse_header() {
    auto h = parse_object_header(header, expected, *options, std::nullopt);
    if (!h) {
      return fail(std::move(h.error()));
    }
    stream_len = h->stream_len;
    body_len = h->body_len;
    compressed = h->compressed;
    total = h->object_len;
    signer = h->signer;
    if (signer != nullptr) {
      hmac.emplace(signer->secret);
      hmac->update(header);
    }
    // Checked after the signature is known, as decode_object does: a failure
    // here is reported once the signature has been checked (fail()).
    if (auto lengths = check_object_lengths(*h, *options); !lengths) {
      return fail(std::move(lengths.error()));
    }
    if (compressed) {
      dctx.reset(ZSTD_createDCtx());
      ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, k_max_window_log);
      inflated.resize(ZSTD_DStreamOutSize());
    }
    return true;
  }

  // Takes up to `want` bytes of `in` into `buf` until it holds `size`.
  static void gather(std::string& buf, std::size_t size, std::string_view& in) {
    const std::size_t k = std::min(size - buf.size(), in.size());
    buf.append(in.substr(0, k));
    in.remove_prefix(k);
  }

  // The artifact stream's bytes, in order.
  bool stream_bytes(std::string_view in) {
    stream_seen += in.size();
    if (stream_seen > stream_len) {
      return fail(Rejection::malformed, "the body holds more than the announced stream");
    }
    while (!in.empty()) {
      if (stream_header.size() < k_artifact_stream_header_bytes) {
        const std::string_view before = in;
        gather(stream_header, k_artifact_stream_header_bytes, in);
        xxh.update(before.data(), before.size() - in.size());
        if (stream_header.size() < k_artifact_stream_header_bytes) {
          return true;
        }
        auto h = decode_artifact_header(stream_header, options->max_entry_size);
        if (!h) {
          return fail(Rejection::corrupt, h.error().message);
        }
        art = *h;
        if (k_artifact_stream_header_bytes + std::uint64_t{art.passport_len} + art.payload_len +
                k_artifact_stream_trailer_bytes !=
            stream_len) {
          return fail(Rejection::corrupt, "bad artifact stream: its lengths do not add up to the announced stream");
        }
        art_parsed = true;
        continue;
      }
      if (passport_json.size() < art.passport_len) {
        const std::string_view before = in;
        gather(passport_json, art.passport_len, in);
        xxh.update(before.data(), before.size() - in.size());
        continue;
      }
      if (payload_seen < art.payload_len) {
        const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), art.payload_len - payload_seen));
        const std::string_view part = in.substr(0, k);
        xxh.update(part.data(), part.size());
        sha.update(part);
        payload_seen += k;
        in.remove_prefix(k);
        if (auto w = write_payload(part); !w) {
          sink_error = w.error();
          stopped = true;
          return false;
        }
        continue;
      }
      gather(trailer, k_artifact_stream_trailer_bytes, in);
      if (!in.empty()) {
        return fail(Rejection::corrupt, "bad artifact stream: unexpected bytes after the trailer");
      }
    }
    return true;
  }

  bool body_bytes(std::string_view in) {
    if (stopped) {
      return !sink_error && hmac.has_value();
    }
    if (!compressed) {
      return stream_bytes(in);
    }
    if (!frame_checked) {
      // The frame's header (at most 18 bytes) must declare exactly stream_len.
      constexpr std::size_t k_frame_header_max = 18;
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(k_frame_header_max, body_len));
      const std::size_t before = frame_start.size();
      frame_start.append(in.substr(0, std::min(in.size(), want - before)));
      if (frame_start.size() < want) {
        return true;  // more bytes needed
      }
      const unsigned long long declared = ZSTD_getFrameContentSize(frame_start.data(), frame_start.size());
      if (declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR || declared != stream_len) {
        return fail(Rejection::malformed, "the zstd frame does not declare the announced size");
      }
      frame_checked = true;
      const std::string held = std::move(frame_start);
      // The bytes gathered by earlier calls, then all of this call's.
      return inflate(std::string_view(held).substr(0, before)) && inflate(in);
    }
    return inflate(in);
  }

  bool inflate(std::string_view in) {
    if (stopped) {
      return !sink_error && hmac.has_value();
    }
    ZSTD_inBuffer ib{in.data(), in.size(), 0};
    while (ib.pos < ib.size) {
      if (frame_ended) {
        return fail(Rejection::malformed, "bytes after the zstd frame");
      }
      ZSTD_outBuffer ob{inflated.data(), inflated.size(), 0};
      const std::size_t r = ZSTD_decompressStream(dctx.get(), &ob, &ib);
      if (ZSTD_isError(r) != 0U) {
        return fail(Rejection::malformed, std::string("bad zstd frame: ") + ZSTD_getErrorName(r));
      }
      frame_ended = r == 0;
      if (ob.pos > 0 && !stream_bytes(std::string_view(inflated.data(), ob.pos))) {
        return false;
      }
      if (stopped) {
        return !sink_error && hmac.has_value();
      }
    }
    return true;
  }
};

ObjectDecoder::ObjectDecoder(const Key& expected, const CodecOptions& options, PayloadWrite write_payload)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->expected = expected;
  m_impl->options = &options;
  m_impl->write_payload = std::move(write_payload);
}

ObjectDecoder::~ObjectDecoder() = default;

const std::optional<Error>& ObjectDecoder::sink_error() const noexcept { return m_impl->sink_error; }

std::uint64_t ObjectDecoder::received() const noexcept { return m_impl->received; }

bool ObjectDecoder::write(std::string_view bytes) {
  Impl& m = *m_impl;
  if (m.sink_error || (m.rejected && !m.hmac)) {
    return false;
  }
  m.received += bytes.size();
  if (m.received > m.options->max_entry_size || (m.total > 0 && m.received > m.total)) {
    m.hmac.reset();  // past any bound: refused without reading further
    if (m.received > m.options->max_entry_size) {
      m.fail(Rejection::too_large,
             fmt::format("object is larger than max_entry_size ({} bytes)", m.options->max_entry_size));
    } else {
      m.fail(Rejection::malformed, fmt::format("object is longer than its header announces ({} bytes)", m.total));
    }
    return false;
  }
  while (!bytes.empty()) {
    switch (m.phase) {
      case Impl::Phase::header: {
        Impl::gather(m.header, k_remote_header_bytes, bytes);
        if (m.header.size() < k_remote_header_bytes) {
          return true;
        }
        if (!m.parse_header()) {
          return false;
        }
        m.phase = m.body_len > 0 ? Impl::Phase::body : Impl::Phase::signature;
        break;
      }
      case Impl::Phase::body: {
        const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), m.body_len - m.body_seen));
        const std::string_view part = bytes.substr(0, k);
        bytes.remove_prefix(k);
        if (m.hmac) {
          m.hmac->update(part);
        }
        m.body_seen += k;
        if (!m.body_bytes(part)) {
          return false;
        }
        if (m.body_seen == m.body_len) {
          m.phase = Impl::Phase::signature;
        }
        break;
      }
      case Impl::Phase::signature:
        Impl::gather(m.signature, static_cast<std::size_t>(m.total - k_remote_header_bytes - m.body_len), bytes);
        if (m.signature.size() == m.total - k_remote_header_bytes - m.body_len) {
          m.phase = Impl::Phase::done;
        }
        break;
      case Impl::Phase::done:
        m.hmac.reset();
        m.fail(Rejection::malformed, fmt::format("object is longer than its header announces ({} bytes)", m.total));
        return false;
    }
  }
  if (m.phase == Impl::Phase::signature && m.total == k_remote_header_bytes + m.body_len) {
    m.phase = Impl::Phase::done;
  }
  return true;
}

tl::expected<Passport, RejectedObject> ObjectDecoder::finish() {
  Impl& m = *m_impl;
  if (m.phase == Impl::Phase::signature && m.signature.size() == m.total - k_remote_header_bytes - m.body_len) {
    m.phase = Impl::Phase::done;
  }
  if (m.phase != Impl::Phase::done) {
    if (m.rejected && !m.hmac) {
      return tl::unexpected(*m.rejected);
    }
    return reject(Rejection::malformed, m.total > 0 ? fmt::format("object is {} bytes; its header announces {}",
                                                                  m.received, m.total)
                                                    : fmt::format("object of {} bytes is shorter than its header",
                                                                  m.received));
  }
  if (m.hmac) {
    const util::Digest256 mac = m.hmac->finish();
    m.hmac.reset();
    if (m.signature.size() != mac.size() || !util::equal_constant_time(mac.data(), m.signature.data(), mac.size())) {
      return reject(Rejection::bad_signature, "the HMAC does not match: the object was changed after signing");
    }
  }
  if (m.rejected) {
    return tl::unexpected(*m.rejected);
  }
  if (m.compressed && (!m.frame_ended || m.stream_seen != m.stream_len)) {
    return reject(Rejection::malformed, "zstd frame inflates to the wrong size");
  }
  if (!m.art_parsed || m.trailer.size() != k_artifact_stream_trailer_bytes) {
    return reject(Rejection::corrupt, "bad artifact stream: truncated");
  }
  if (m.xxh.digest() != wire::load_le(m.trailer.data(), 8)) {
    return reject(Rejection::corrupt, "bad artifact stream: trailer checksum does not match");
  }
  auto passport = Passport::from_json(m.passport_json);
  if (!passport) {
    return reject(Rejection::corrupt, "bad artifact stream: " + passport.error().message);
  }
  if (passport->format != k_passport_format_version || !is_valid_kind(passport->kind) ||
      passport->payload_size != m.payload_seen) {
    return reject(Rejection::corrupt, "bad artifact stream: the passport does not describe the payload");
  }
  const util::Digest256 digest = m.sha.finish();
  if (passport->payload_sha256 != util::to_hex(digest.data(), digest.size())) {
    return reject(Rejection::corrupt, "bad artifact stream: payload SHA-256 does not match the passport");
  }
  if (auto own = check_entry_identity(passport->key, *passport); !own) {
    return reject(Rejection::corrupt, "bad artifact stream: " + own.error().message);
  }
  if (auto ok = check_entry_identity(m.expected, *passport); !ok) {
    return reject(Rejection::wrong_key, ok.error().message);
  }
  return std::move(*passport);
}

}  // namespace kcache::remote
