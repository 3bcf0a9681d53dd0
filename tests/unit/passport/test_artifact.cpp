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
    std::string bytes(b.payload);
    bytes[bit / 8] = static_cast<char>(bytes[bit / 8] ^ (1 << (bit % 8)));
    b.payload = std::move(bytes);
    ASSERT_FALSE(b.verify().has_value()) << "bit " << bit;
  }
  for (std::size_t len : {std::size_t{0}, a.payload.size() - 1, a.payload.size() + 1}) {
    Artifact b = a;
    std::string bytes(b.payload);
    bytes.resize(len, 'a');
    b.payload = std::move(bytes);
    EXPECT_FALSE(b.verify().has_value()) << len;
  }
}

// A Payload is immutable and shared: copies share one buffer, a new value
// replaces the buffer of one copy only, and the bytes end in a NUL byte.
TEST(Payload, CopiesShareOneBufferAndAssignmentReplacesOnlyOneCopy) {
  std::string text(1000, 'p');
  const char* buffer = text.data();
  kcache::Payload a = std::move(text);
  EXPECT_EQ(a.data(), buffer) << "the string's buffer is taken over, not copied";
  kcache::Payload b = a;
  EXPECT_TRUE(b.shares_with(a));
  EXPECT_EQ(b.data(), a.data());
  b = std::string(1000, 'q');
  EXPECT_FALSE(b.shares_with(a));
  EXPECT_EQ(a, std::string(1000, 'p'));
  EXPECT_EQ(b, std::string(1000, 'q'));
  EXPECT_EQ(a.c_str()[a.size()], '\0');
  const kcache::Payload empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty, "");
  EXPECT_EQ(empty.c_str()[0], '\0');
  EXPECT_EQ(kcache::Payload("abc").find("c"), 2u);
  EXPECT_EQ(std::string(kcache::Payload("abc")), "abc");
  EXPECT_NE(kcache::Payload("abc"), kcache::Payload("abd"));
}

// verify_shape() is verify() without the digest: size, kind and format only.
TEST(Artifact, VerifyShapeChecksSizeKindAndFormatButNotTheDigest) {
  auto a = Artifact::make(KeyBuilder("test").add("t", "1"), "blob", std::string(64, 'a'));
  EXPECT_TRUE(a.verify_shape().has_value());
  Artifact flipped = a;
  flipped.payload = 'b' + std::string(a.payload.view().substr(1));
  EXPECT_TRUE(flipped.verify_shape().has_value());
  EXPECT_FALSE(flipped.verify().has_value());
  Artifact longer = a;
  longer.payload = std::string(a.payload) + 'a';
  EXPECT_FALSE(longer.verify_shape().has_value());
  Artifact kind = a;
  kind.passport.kind = "";
  EXPECT_FALSE(kind.verify_shape().has_value());
  Artifact format = a;
  format.passport.format = 2;
  EXPECT_FALSE(format.verify_shape().has_value());
}
