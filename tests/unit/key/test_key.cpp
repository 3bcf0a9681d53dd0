#include "kcache/key.hpp"

#include <gtest/gtest.h>

#include <string>

using kcache::ErrorCode;
using kcache::Key;

namespace {
const std::string k_good = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
}

TEST(Key, ParsesAndPrintsLowercaseHex) {
  auto key = Key::parse(k_good);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->hex(), k_good);
  EXPECT_EQ(key->shard(), "01");
  EXPECT_EQ(key->bytes()[1], 0x23);
}

// TESTING S01: nothing but 64 lowercase hex characters is a key.
TEST(Key, RejectsEverythingElseBeforeAnyPathIsBuilt) {
  const std::string bad[] = {
      "",
      k_good.substr(0, 63),
      k_good + "0",
      "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
      "../" + k_good.substr(3),
      k_good.substr(0, 62) + "/x",
      std::string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\0", 64),
      " " + k_good.substr(1),
      k_good.substr(0, 63) + "g",
  };
  for (const auto& text : bad) {
    auto key = Key::parse(text);
    ASSERT_FALSE(key.has_value()) << text;
    EXPECT_EQ(key.error().code, ErrorCode::invalid_argument);
    EXPECT_FALSE(Key::is_valid_hex(text));
  }
}

TEST(Key, OrdersAndComparesByBytes) {
  auto a = *Key::parse(k_good);
  auto b = *Key::parse("1" + k_good.substr(1));
  EXPECT_LT(a, b);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, *Key::parse(k_good));
  EXPECT_TRUE(Key().is_zero());
  EXPECT_FALSE(a.is_zero());
}
