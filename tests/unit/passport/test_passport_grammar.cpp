// Passport::from_json is strict to the grammar of docs/passport.md: every
// member required, at every depth; nothing unknown or repeated; right types.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kcache/artifact.hpp"
#include "kcache/passport.hpp"

namespace kcache {
namespace {

using nlohmann::json;

std::string sample_json() {
  KeyBuilder kb("nvrtc");
  kb.add("arch", "sm_90").add_content("source", "k");
  auto a = Artifact::make(kb, "cubin", "payload", {"nvrtc", "13.0"}, {"sm_90", "host"});
  a.passport.log = "log";
  a.passport.symbols = {{"k<1>", "_Z1kILi1EEvv"}};
  a.passport.labels = {{"model", "x"}};
  return a.passport.to_json();
}

struct Case {
  const char* name;
  std::function<void(json&)> edit;
};

// Each case is one violation that today's main accepted or that the grammar
// forbids; each must be refused as `corrupt` with a reason.
TEST(PassportGrammar, RefusesEveryViolationAtEveryDepth) {
  const std::vector<Case> cases = {
      {"empty fields", [](json& j) { j["key_record"]["fields"] = json::array(); }},
      {"no domain", [](json& j) { j["key_record"].erase("domain"); }},
      {"no schema", [](json& j) { j["key_record"].erase("schema"); }},
      {"no fields", [](json& j) { j["key_record"].erase("fields"); }},
      {"schema 2", [](json& j) { j["key_record"]["schema"] = 2; }},
      {"empty domain", [](json& j) { j["key_record"]["domain"] = ""; }},
      {"domain not a name", [](json& j) { j["key_record"]["domain"] = "NV RTC"; }},
      {"unknown key_record member", [](json& j) { j["key_record"]["extra"] = 1; }},
      {"no key_record", [](json& j) { j.erase("key_record"); }},
      {"field without digest", [](json& j) { j["key_record"]["fields"][0].erase("digest"); }},
      {"field without name", [](json& j) { j["key_record"]["fields"][0].erase("name"); }},
      {"field without value", [](json& j) { j["key_record"]["fields"][0].erase("value"); }},
      {"unknown field member", [](json& j) { j["key_record"]["fields"][1]["why"] = "x"; }},
      {"field name empty", [](json& j) { j["key_record"]["fields"][0]["name"] = ""; }},
      {"field value a number", [](json& j) { j["key_record"]["fields"][0]["value"] = 90; }},
      {"no producer", [](json& j) { j.erase("producer"); }},
      {"no producer.name", [](json& j) { j["producer"].erase("name"); }},
      {"no producer.version", [](json& j) { j["producer"].erase("version"); }},
      {"unknown producer member", [](json& j) { j["producer"]["build"] = "x"; }},
      {"no target", [](json& j) { j.erase("target"); }},
      {"no target.arch", [](json& j) { j["target"].erase("arch"); }},
      {"no target.host", [](json& j) { j["target"].erase("host"); }},
      {"unknown target member", [](json& j) { j["target"]["os"] = "linux"; }},
      {"target a string", [](json& j) { j["target"] = "sm_90"; }},
      {"unknown payload member", [](json& j) { j["payload"]["crc"] = 0; }},
      {"no payload.size", [](json& j) { j["payload"].erase("size"); }},
      {"payload.size a float", [](json& j) { j["payload"]["size"] = 7.0; }},
      {"no log", [](json& j) { j.erase("log"); }},
      {"no symbols", [](json& j) { j.erase("symbols"); }},
      {"no labels", [](json& j) { j.erase("labels"); }},
      {"no created_unix_ms", [](json& j) { j.erase("created_unix_ms"); }},
      {"no compile_duration_us", [](json& j) { j.erase("compile_duration_us"); }},
      {"created_unix_ms above int64", [](json& j) { j["created_unix_ms"] = 18446744073709551615ULL; }},
      {"compile_duration_us negative", [](json& j) { j["compile_duration_us"] = -1; }},
      {"log null", [](json& j) { j["log"] = nullptr; }},
      {"labels an array", [](json& j) { j["labels"] = json::array(); }},
      {"no kind", [](json& j) { j.erase("kind"); }},
      {"format 0", [](json& j) { j["format"] = 0; }},
      {"format a float", [](json& j) { j["format"] = 1.0; }},
  };
  const json good = json::parse(sample_json());
  ASSERT_TRUE(Passport::from_json(good.dump()).has_value());
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    auto p = Passport::from_json(j.dump());
    ASSERT_FALSE(p.has_value()) << c.name;
    EXPECT_EQ(p.error().code, ErrorCode::corrupt) << c.name;
    EXPECT_FALSE(p.error().message.empty()) << c.name;
  }
}

// nlohmann keeps the last of two equal member names; the grammar allows one.
TEST(PassportGrammar, RefusesARepeatedMember) {
  const std::string good = sample_json();
  ASSERT_EQ(good.front(), '{');
  const std::vector<std::string> repeated = {
      "{\"kind\":\"ptx\"," + good.substr(1),                                   // top level
      [&] {
        std::string s = good;
        const auto at = s.find("\"producer\":{") + 12;
        return s.insert(at, "\"name\":\"other\",");
      }(),                                                                      // nested
      [&] {
        std::string s = good;
        const auto at = s.find("\"labels\":{") + 10;
        return s.insert(at, "\"model\":\"y\",");
      }(),                                                                      // in a map
      [&] {
        std::string s = good;
        const auto at = s.find("\"fields\":[{") + 11;
        return s.insert(at, "\"name\":\"x\",");
      }(),                                                                      // in an array's object
  };
  for (const auto& text : repeated) {
    ASSERT_TRUE(json::accept(text)) << text;
    auto p = Passport::from_json(text);
    ASSERT_FALSE(p.has_value()) << text;
    EXPECT_NE(p.error().message.find("twice"), std::string::npos) << p.error().message;
  }
}

// A newer format is refused whole and first, as `unsupported`: whatever else
// the document holds (members this reader does not know) is never read.
TEST(PassportGrammar, NewerFormatIsRefusedBeforeAnyOtherMember) {
  json j = json::parse(sample_json());
  j["format"] = 2;
  j["signature"] = "abc";
  j.erase("key");
  auto p = Passport::from_json(j.dump());
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, ErrorCode::unsupported);
  EXPECT_NE(p.error().message.find("format version 2"), std::string::npos) << p.error().message;
}

}  // namespace
}  // namespace kcache
