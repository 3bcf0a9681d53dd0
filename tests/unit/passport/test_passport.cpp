#include "kcache/passport.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kcache/artifact.hpp"

using kcache::Artifact;
using kcache::ErrorCode;
using kcache::KeyBuilder;
using kcache::Passport;

namespace {
Passport sample() {
  auto a = Artifact::make(KeyBuilder("test").add("t", "1").add("kind", "cubin").add_content("src", "k"), "cubin",
                          "payload bytes", {"nvrtc", "13.0"}, {"sm_90a", "host-1"});
  a.passport.log = "warning: something\n";
  a.passport.symbols = {{"add<int>", "_Z3addIiEvPT_"}};
  a.passport.labels = {{"model", "x"}};
  a.passport.compile_duration_us = 12345;
  return a.passport;
}
}  // namespace

TEST(Passport, RoundTripsThroughJson) {
  const Passport p = sample();
  auto back = Passport::from_json(p.to_json());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, p);
  auto pretty = Passport::from_json(p.to_pretty_json());
  ASSERT_TRUE(pretty.has_value());
  EXPECT_EQ(*pretty, p);
}

// TESTING F08: bad passports are rejected with a reason, never trusted.
TEST(Passport, RejectsMalformedDocuments) {
  const std::string good = sample().to_json();
  auto mutate = [&](auto&& fn) {
    auto j = nlohmann::json::parse(good);
    fn(j);
    return j.dump();
  };
  const std::string bad[] = {
      "",
      "{",
      "[]",
      "null",
      good.substr(0, good.size() / 2),
      mutate([](auto& j) { j["format"] = 0; }),
      mutate([](auto& j) { j["format"] = "1"; }),
      mutate([](auto& j) { j.erase("key"); }),
      mutate([](auto& j) { j["key"] = "../etc"; }),
      mutate([](auto& j) { j["kind"] = "Cubin!"; }),
      mutate([](auto& j) { j.erase("payload"); }),
      mutate([](auto& j) { j["payload"]["size"] = -1; }),
      mutate([](auto& j) { j["payload"]["sha256"] = "abc"; }),
      mutate([](auto& j) { j["symbols"]["x"] = 1; }),
      mutate([](auto& j) { j["surprise"] = true; }),
      mutate([](auto& j) { j["key_record"]["fields"][0]["digest"] = "yes"; }),
  };
  for (const auto& text : bad) {
    auto p = Passport::from_json(text);
    ASSERT_FALSE(p.has_value()) << text;
    EXPECT_EQ(p.error().code, ErrorCode::corrupt);
    EXPECT_FALSE(p.error().message.empty());
  }
}

TEST(Passport, RejectsHugeDocumentsWithoutParsing) {
  std::string huge(kcache::k_passport_max_bytes + 1, ' ');
  auto p = Passport::from_json(huge);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("larger"), std::string::npos);
}

// One passport, one meaning: a NUL byte anywhere is refused, wherever it is
// (the JSON reader underneath takes a NUL for the end of its input, so
// "{...}\0GARBAGE" would otherwise be read as the passport before it).
TEST(Passport, ANulByteAnywhereIsRefused) {
  const std::string good = sample().to_json();
  for (const std::string& text : {good + std::string("\0GARBAGE", 8), good + std::string(1, '\0'),
                                  std::string(1, '\0') + good, good.substr(0, 10) + std::string(1, '\0') + good.substr(10)}) {
    auto p = Passport::from_json(text);
    ASSERT_FALSE(p.has_value()) << "accepted a passport with a NUL byte at " << text.find('\0');
    EXPECT_EQ(p.error().code, ErrorCode::corrupt);
    EXPECT_NE(p.error().message.find("a NUL byte at offset " + std::to_string(text.find('\0'))), std::string::npos)
        << p.error().message;
  }
  // Escaped, a NUL is a character of a string like any other.
  Passport p = sample();
  p.log = std::string("a\0b", 3);
  auto back = Passport::from_json(p.to_json());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->log, p.log);
}
