// The remote object format written and read in parts (object_stream.hpp):
// objects the streamed writer makes are the format decode_object reads, the
// streamed reader accepts exactly what decode_object accepts, and refuses
// every damaged byte for the same reason (TESTING R02), whatever the chunks.
#include "store/remote/object_stream.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kcache/key_builder.hpp"
#include "store/remote/team_key.hpp"
#include "support/payload.hpp"

namespace kr = kcache::remote;
using kcache::Artifact;
using kcache::Key;
using kcache::KeyBuilder;

namespace {

kr::CodecOptions options_for(kr::Compression compression, bool sign) {
  kr::CodecOptions o;
  o.compression = compression;
  if (sign) {
    o.sign = *kr::make_team_key(std::string(32, 's'), "test");
  }
  return o;
}

kr::PayloadReadAt reader_of(const Artifact& a) {
  return [&a](std::uint64_t at, char* out, std::size_t n) -> kcache::Result<void> {
    std::memcpy(out, a.payload.data() + at, n);
    return {};
  };
}

std::string encode_streamed(const Artifact& a, const kr::CodecOptions& o, std::size_t chunk = 4096) {
  auto encoder = kr::ObjectEncoder::make(a.passport, reader_of(a), o);
  EXPECT_TRUE(encoder.has_value());
  std::string out;
  std::string buf(chunk, '\0');
  for (;;) {
    auto n = (*encoder)->read(buf.data(), buf.size());
    EXPECT_TRUE(n.has_value());
    if (!n || *n == 0) {
      break;
    }
    out.append(buf.data(), *n);
  }
  EXPECT_EQ(out.size(), (*encoder)->size());
  return out;
}

struct Decoded {
  tl::expected<kcache::Passport, kr::RejectedObject> passport;
  std::string payload;
};

// Feeds `object` in chunks of sizes drawn from `seed` (1 byte to 64 KiB).
Decoded decode_streamed(std::string_view object, const Key& key, const kr::CodecOptions& o, unsigned seed) {
  Decoded d{tl::unexpected(kr::RejectedObject{}), {}};
  kr::ObjectDecoder decoder(key, o, [&](std::string_view b) -> kcache::Result<void> {
    d.payload.append(b);
    return {};
  });
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> size(1, 64 * 1024);
  while (!object.empty()) {
    const std::size_t k = std::min(size(rng), object.size());
    if (!decoder.write(object.substr(0, k))) {
      break;
    }
    object.remove_prefix(k);
  }
  d.passport = decoder.finish();
  return d;
}

}  // namespace

TEST(ObjectStream, StreamedObjectsAreTheFormatEveryReaderReads) {
  // Small and large (past the 4 MiB where the first MiB decides compression),
  // compressible and not, signed and not.
  const Artifact text = Artifact::make(KeyBuilder("test").add("n", "text"), "blob", std::string(5 << 20, 'x'));
  const Artifact noise = kcache::test::make_artifact(3, 5, 5 << 20);
  const Artifact small = kcache::test::make_artifact(4, 6, 3000);
  for (const Artifact* a : {&text, &noise, &small}) {
    for (auto compression : {kr::Compression::none, kr::Compression::zstd}) {
      for (bool sign : {false, true}) {
        const kr::CodecOptions o = options_for(compression, sign);
        const std::string object = encode_streamed(*a, o, 100000);
        auto whole = kr::decode_object(object, a->passport.key, o);
        ASSERT_TRUE(whole.has_value()) << whole.error().message;
        EXPECT_EQ(*whole, *a);
        auto parts = decode_streamed(object, a->passport.key, o, 1);
        ASSERT_TRUE(parts.passport.has_value()) << parts.passport.error().message;
        EXPECT_EQ(*parts.passport, a->passport);
        EXPECT_EQ(parts.payload, a->payload.view());
        // And what encode_object writes, the streamed reader reads.
        auto back = decode_streamed(kr::encode_object(*a, o), a->passport.key, o, 2);
        ASSERT_TRUE(back.passport.has_value()) << back.passport.error().message;
        EXPECT_EQ(back.payload, a->payload.view());
      }
    }
  }
  // A compressible large stream is compressed, an incompressible one is not.
  const kr::CodecOptions zstd = options_for(kr::Compression::zstd, false);
  EXPECT_LT(encode_streamed(text, zstd).size(), std::size_t{1} << 20);
  EXPECT_GT(encode_streamed(noise, zstd).size(), std::size_t{5} << 20);
}

TEST(ObjectStream, EveryDamagedByteIsRefusedForTheReasonDecodeObjectGives) {
  const Artifact a = kcache::test::make_artifact(9, 2, 1500);
  for (auto compression : {kr::Compression::none, kr::Compression::zstd}) {
    for (bool sign : {false, true}) {
      const kr::CodecOptions o = options_for(compression, sign);
      const std::string object = kr::encode_object(a, o);
      for (std::size_t i = 0; i < object.size(); ++i) {
        std::string bad = object;
        bad[i] = static_cast<char>(bad[i] ^ 0x41);
        auto whole = kr::decode_object(bad, a.passport.key, o);
        auto parts = decode_streamed(bad, a.passport.key, o, static_cast<unsigned>(i));
        if (whole.has_value()) {
          // (A flip the format does not cover: a zero signer of an unsigned
          // reader ... never the payload.) Both must then agree on the bytes.
          ASSERT_TRUE(parts.passport.has_value()) << "byte " << i;
          EXPECT_EQ(parts.payload, whole->payload.view());
          continue;
        }
        ASSERT_FALSE(parts.passport.has_value()) << "byte " << i << " accepted by the streamed reader";
        // body_len (bytes 56-63) is the exception: a header announcing more than
        // max_entry_size is too_large before its bytes arrive, while a whole
        // object of the real size says its lengths do not add up.
        if (sign && (i < 56 || i >= 64)) {
          // Signed: any change is refused for its signature (or its header) first, as a whole.
          EXPECT_EQ(parts.passport.error().reason, whole.error().reason)
              << "byte " << i << ": " << parts.passport.error().message << " / " << whole.error().message;
        }
      }
      // Truncated anywhere, or with a byte more: refused.
      for (std::size_t cut : {std::size_t{0}, std::size_t{40}, std::size_t{80}, object.size() / 2, object.size() - 1}) {
        EXPECT_FALSE(decode_streamed(std::string_view(object).substr(0, cut), a.passport.key, o, 3).passport);
      }
      EXPECT_FALSE(decode_streamed(object + "x", a.passport.key, o, 4).passport);
    }
  }
}

TEST(ObjectStream, TheReaderRefusesObjectsOfOtherKeysSignersAndSizes) {
  const Artifact a = kcache::test::make_artifact(5, 5, 20000);
  const kr::CodecOptions plain = options_for(kr::Compression::zstd, false);
  const kr::CodecOptions signed_s = options_for(kr::Compression::zstd, true);
  kr::CodecOptions other = plain;
  other.sign = *kr::make_team_key(std::string(32, 'o'), "other");
  const std::string object = encode_streamed(a, signed_s);
  EXPECT_EQ(decode_streamed(object, kcache::test::test_key(77), signed_s, 1).passport.error().reason,
            kr::Rejection::wrong_key);
  EXPECT_EQ(decode_streamed(object, a.passport.key, other, 1).passport.error().reason,
            kr::Rejection::unknown_signer);
  EXPECT_EQ(decode_streamed(encode_streamed(a, plain), a.passport.key, signed_s, 1).passport.error().reason,
            kr::Rejection::unsigned_entry);
  kr::CodecOptions small = signed_s;
  small.max_entry_size = 1000;
  EXPECT_EQ(decode_streamed(object, a.passport.key, small, 1).passport.error().reason, kr::Rejection::too_large);
  // A payload writer that fails stops the decoding with its error.
  kr::ObjectDecoder decoder(a.passport.key, signed_s, [](std::string_view) -> kcache::Result<void> {
    return kcache::make_error(kcache::ErrorCode::no_space, "disk full");
  });
  EXPECT_FALSE(decoder.write(object));
  ASSERT_TRUE(decoder.sink_error().has_value());
  EXPECT_EQ(decoder.sink_error()->code, kcache::ErrorCode::no_space);
}
