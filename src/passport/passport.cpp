// Passport (de)serialisation. The grammar is in include/kcache/passport.hpp and
// docs/passport.md; the parser below is its only reader and checks every rule.
#include "kcache/passport.hpp"

#include <nlohmann/json.hpp>

#include "util/hex.hpp"

namespace kcache {

namespace {

using nlohmann::json;

json to_json_value(const Passport& p) {
  json fields = json::array();
  for (const auto& f : p.key_record.fields) {
    fields.push_back({{"name", f.name}, {"value", f.value}, {"digest", f.digested}});
  }
  // Binary-unsafe strings (a log with invalid UTF-8) are replaced, not thrown on.
  return json{
      {"format", p.format},
      {"key", p.key.hex()},
      {"key_record",
       {{"schema", p.key_record.schema}, {"domain", p.key_record.domain}, {"fields", fields}}},
      {"kind", p.kind},
      {"producer", {{"name", p.producer.name}, {"version", p.producer.version}}},
      {"target", {{"arch", p.target.arch}, {"host", p.target.host}}},
      {"payload", {{"size", p.payload_size}, {"sha256", p.payload_sha256}}},
      {"created_unix_ms", p.created_unix_ms},
      {"compile_duration_us", p.compile_duration_us},
      {"log", p.log},
      {"symbols", p.symbols},
      {"labels", p.labels},
  };
}

// A small strict reader: each accessor records the first violation.
class Reader {
 public:
  std::string error;

  const json* member(const json& obj, const char* name, bool required) {
    const auto it = obj.find(name);
    if (it == obj.end()) {
      if (required) {
        fail(std::string("missing member '") + name + "'");
      }
      return nullptr;
    }
    return &*it;
  }

  std::string str(const json& obj, const char* name, bool required = false) {
    const json* v = member(obj, name, required);
    if (v == nullptr) {
      return {};
    }
    if (!v->is_string()) {
      fail(std::string("member '") + name + "' is not a string");
      return {};
    }
    return v->get<std::string>();
  }

  std::uint64_t u64(const json& obj, const char* name, bool required = false) {
    const json* v = member(obj, name, required);
    if (v == nullptr) {
      return 0;
    }
    if (!v->is_number_unsigned()) {
      fail(std::string("member '") + name + "' is not a non-negative integer");
      return 0;
    }
    return v->get<std::uint64_t>();
  }

  std::int64_t i64(const json& obj, const char* name) {
    const json* v = member(obj, name, false);
    if (v == nullptr) {
      return 0;
    }
    if (!v->is_number_integer()) {
      fail(std::string("member '") + name + "' is not an integer");
      return 0;
    }
    return v->get<std::int64_t>();
  }

  const json* object(const json& obj, const char* name, bool required = false) {
    const json* v = member(obj, name, required);
    if (v != nullptr && !v->is_object()) {
      fail(std::string("member '") + name + "' is not an object");
      return nullptr;
    }
    return v;
  }

  std::map<std::string, std::string> string_map(const json& obj, const char* name) {
    std::map<std::string, std::string> out;
    const json* v = object(obj, name);
    if (v == nullptr) {
      return out;
    }
    if (v->size() > k_passport_max_entries) {
      fail(std::string("member '") + name + "' has too many entries");
      return out;
    }
    for (const auto& [k, val] : v->items()) {
      if (!val.is_string()) {
        fail(std::string("member '") + name + "' holds a non-string value");
        return out;
      }
      out.emplace(k, val.get<std::string>());
    }
    return out;
  }

  void fail(std::string why) {
    if (error.empty()) {
      error = std::move(why);
    }
  }
};

}  // namespace

bool is_valid_kind(std::string_view kind) noexcept {
  if (kind.empty() || kind.size() > 32) {
    return false;
  }
  for (char c : kind) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

std::string Passport::to_json() const {
  return to_json_value(*this).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Passport::to_pretty_json() const {
  return to_json_value(*this).dump(2, ' ', false, json::error_handler_t::replace);
}

Result<Passport> Passport::from_json(std::string_view text) {
  auto corrupt = [](const std::string& why) {
    return make_error(ErrorCode::corrupt, "bad passport: " + why);
  };
  if (text.empty()) {
    return corrupt("empty");
  }
  if (text.size() > k_passport_max_bytes) {
    return corrupt("larger than " + std::to_string(k_passport_max_bytes) + " bytes");
  }
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return corrupt("not valid JSON");
  }
  if (!doc.is_object()) {
    return corrupt("not a JSON object");
  }
  static constexpr const char* k_members[] = {
      "format",  "key",     "key_record",      "kind",
      "producer", "target", "payload",         "created_unix_ms",
      "compile_duration_us", "log", "symbols", "labels"};
  for (const auto& [name, value] : doc.items()) {
    bool known = false;
    for (const char* m : k_members) {
      known = known || name == m;
    }
    if (!known) {
      return corrupt("unknown member '" + name + "'");
    }
  }

  Reader r;
  Passport p;
  const std::uint64_t format = r.u64(doc, "format", true);
  if (r.error.empty() && format != static_cast<std::uint64_t>(k_passport_format_version)) {
    return corrupt("format version " + std::to_string(format) + " is not supported (expected " +
                   std::to_string(k_passport_format_version) + ")");
  }
  p.format = static_cast<int>(format);

  const std::string key_hex = r.str(doc, "key", true);
  if (r.error.empty()) {
    auto key = Key::parse(key_hex);
    if (!key) {
      return corrupt("member 'key' is not a 64-hex key");
    }
    p.key = *key;
  }

  if (const json* rec = r.object(doc, "key_record")) {
    p.key_record.schema = static_cast<std::uint32_t>(r.u64(*rec, "schema"));
    p.key_record.domain = r.str(*rec, "domain");
    if (const json* fields = r.member(*rec, "fields", false)) {
      if (!fields->is_array() || fields->size() > k_passport_max_entries) {
        return corrupt("key_record.fields is not a bounded array");
      }
      for (const auto& f : *fields) {
        if (!f.is_object()) {
          return corrupt("key_record.fields holds a non-object");
        }
        KeyField kf;
        kf.name = r.str(f, "name", true);
        kf.value = r.str(f, "value", true);
        if (const json* d = r.member(f, "digest", false)) {
          if (!d->is_boolean()) {
            return corrupt("key_record field 'digest' is not a boolean");
          }
          kf.digested = d->get<bool>();
        }
        if (kf.digested && !Key::is_valid_hex(kf.value)) {
          return corrupt("key_record field '" + kf.name + "' has a malformed digest");
        }
        p.key_record.fields.push_back(std::move(kf));
      }
    }
  }

  p.kind = r.str(doc, "kind", true);
  if (r.error.empty() && !is_valid_kind(p.kind)) {
    return corrupt("member 'kind' is not [a-z0-9_-]{1,32}");
  }
  if (const json* prod = r.object(doc, "producer")) {
    p.producer.name = r.str(*prod, "name");
    p.producer.version = r.str(*prod, "version");
  }
  if (const json* tgt = r.object(doc, "target")) {
    p.target.arch = r.str(*tgt, "arch");
    p.target.host = r.str(*tgt, "host");
  }
  if (const json* pay = r.object(doc, "payload", true)) {
    p.payload_size = r.u64(*pay, "size", true);
    p.payload_sha256 = r.str(*pay, "sha256", true);
    if (r.error.empty() && !Key::is_valid_hex(p.payload_sha256)) {
      return corrupt("payload.sha256 is not 64 lowercase hex characters");
    }
  }
  p.created_unix_ms = r.i64(doc, "created_unix_ms");
  p.compile_duration_us = r.u64(doc, "compile_duration_us");
  p.log = r.str(doc, "log");
  p.symbols = r.string_map(doc, "symbols");
  p.labels = r.string_map(doc, "labels");
  if (!r.error.empty()) {
    return corrupt(r.error);
  }
  return p;
}

}  // namespace kcache
