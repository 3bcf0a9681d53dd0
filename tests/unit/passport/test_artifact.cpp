#include "kcache/artifact.hpp"

#include <gtest/gtest.h>

using kcache::Artifact;
using kcache::KeyBuilder;

TEST(Artifact, MakeFillsSizeDigestAndKey) {
  auto kb = KeyBuilder("test").add("t", "1").add_content("src", "x");
  auto a = Artifact::make(kb, "blob", "hello");
  EXPECT_EQ(a.passport.payload_size, 5U);
  EXPECT_EQ(a.passport.payload_sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  EXPECT_EQ(a.passport.key, kb.key());
  EXPECT_GT(a.passport.created_unix_ms, 0);
  EXPECT_TRUE(a.verify().has_value());
}

// TESTING F07/F08: a flipped bit or a wrong size is caught by verify().
TEST(Artifact, VerifyCatchesEveryFlippedBitAndSizeChange) {
  auto a = Artifact::make(KeyBuilder("test").add("t", "1"), "blob", std::string(64, 'a'));
  for (std::size_t bit = 0; bit < a.payload.size() * 8; ++bit) {
    Artifact b = a;
    b.payload[bit / 8] = static_cast<char>(b.payload[bit / 8] ^ (1 << (bit % 8)));
    ASSERT_FALSE(b.verify().has_value()) << "bit " << bit;
  }
  for (std::size_t len : {std::size_t{0}, a.payload.size() - 1, a.payload.size() + 1}) {
    Artifact b = a;
    b.payload.resize(len, 'a');
    EXPECT_FALSE(b.verify().has_value()) << len;
  }
}

// verify_shape() is verify() without the digest: size, kind and format only.
TEST(Artifact, VerifyShapeChecksSizeKindAndFormatButNotTheDigest) {
  auto a = Artifact::make(KeyBuilder("test").add("t", "1"), "blob", std::string(64, 'a'));
  EXPECT_TRUE(a.verify_shape().has_value());
  Artifact flipped = a;
  flipped.payload[0] = 'b';
  EXPECT_TRUE(flipped.verify_shape().has_value());
  EXPECT_FALSE(flipped.verify().has_value());
  Artifact longer = a;
  longer.payload.push_back('a');
  EXPECT_FALSE(longer.verify_shape().has_value());
  Artifact kind = a;
  kind.passport.kind = "";
  EXPECT_FALSE(kind.verify_shape().has_value());
  Artifact format = a;
  format.passport.format = 2;
  EXPECT_FALSE(format.verify_shape().has_value());
}
