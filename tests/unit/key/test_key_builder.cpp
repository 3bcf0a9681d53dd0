#include "kcache/key_builder.hpp"

#include <gtest/gtest.h>

#include "util/sha256.hpp"

using kcache::diff;
using kcache::KeyBuilder;
using kcache::recompute_key;

TEST(KeyBuilder, SameInputsGiveSameKey) {
  auto a = KeyBuilder("blob").add("kind", "cubin").add_content("source", "abc");
  auto b = KeyBuilder("blob").add("kind", "cubin").add_content("source", "abc");
  EXPECT_EQ(a.key(), b.key());
  EXPECT_EQ(a.record(), b.record());
}

TEST(KeyBuilder, EveryInputChangesTheKey) {
  const auto base = KeyBuilder("blob").add("a", "1").add_content("b", "2").key();
  EXPECT_NE(base, KeyBuilder("nvrtc").add("a", "1").add_content("b", "2").key());  // domain
  EXPECT_NE(base, KeyBuilder("blob").add("a", "x").add_content("b", "2").key());   // value
  EXPECT_NE(base, KeyBuilder("blob").add("A", "1").add_content("b", "2").key());   // name
  EXPECT_NE(base, KeyBuilder("blob").add("a", "1").add_content("b", "3").key());   // content
  EXPECT_NE(base, KeyBuilder("blob").add("a", "1").add("b", "2").key());           // tag
  EXPECT_NE(base, KeyBuilder("blob").add_content("b", "2").add("a", "1").key());   // order
}

TEST(KeyBuilder, LengthPrefixesPreventAmbiguity) {
  // "ab"+"c" and "a"+"bc" must not collide.
  EXPECT_NE(KeyBuilder("d").add("ab", "c").key(), KeyBuilder("d").add("a", "bc").key());
  EXPECT_NE(KeyBuilder("d").add("x", "").add("y", "").key(), KeyBuilder("d").add("x", "y").key());
}

TEST(KeyBuilder, RecordKeepsValuesAndDigests) {
  auto b = KeyBuilder("blob").add("opt", "-O3").add_content("source", "abc");
  const auto& rec = b.record();
  ASSERT_EQ(rec.fields.size(), 2U);
  EXPECT_EQ(rec.fields[0].value, "-O3");
  EXPECT_FALSE(rec.fields[0].digested);
  EXPECT_EQ(rec.fields[1].value, kcache::util::sha256_hex("abc"));
  EXPECT_TRUE(rec.fields[1].digested);
  auto again = recompute_key(rec);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, b.key());
}

TEST(KeyBuilder, DiffNamesTheFieldsThatDiffer) {
  auto a = KeyBuilder("nvrtc").add("arch", "sm_90").add("opt", "-O3").add_content("src", "x");
  auto b = KeyBuilder("nvrtc").add("arch", "sm_90a").add("opt", "-O3").add_content("src", "y")
               .add("extra", "1");
  auto d = diff(a.record(), b.record());
  ASSERT_EQ(d.size(), 3U);
  EXPECT_EQ(d[0].name, "arch");
  EXPECT_EQ(d[0].left, "sm_90");
  EXPECT_EQ(d[0].right, "sm_90a");
  EXPECT_EQ(d[1].name, "src");
  EXPECT_EQ(d[2].name, "extra");
  EXPECT_FALSE(d[2].left_present);
  EXPECT_TRUE(diff(a.record(), a.record()).empty());
}

TEST(KeyBuilder, RecomputeRejectsMalformedDigest) {
  kcache::KeyRecord rec;
  rec.domain = "blob";
  rec.fields.push_back({"src", "nothex", true});
  EXPECT_FALSE(recompute_key(rec).has_value());
}
