// Passport (de)serialisation. The grammar is in include/kcache/passport.hpp and
// docs/passport.md; the parser below is its only reader and checks every rule.
#include "kcache/passport.hpp"

#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

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

// A strict reader of the grammar: every object must hold exactly its listed
// members with their types; the first violation is kept and wins.
class Reader {
 public:
  std::string error;

  // Checks that `v` is an object holding exactly the members `names`: each
  // present, none other. `where` names the object in messages.
  bool exact_object(const json& v, std::string_view where, std::initializer_list<const char*> names) {
    if (!v.is_object()) {
      fail(std::string(where) + " is not an object");
      return false;
    }
    for (const char* name : names) {
      if (!v.contains(name)) {
        fail(std::string(where) + " has no member '" + name + "'");
        return false;
      }
    }
    if (v.size() != names.size()) {
      for (const auto& [name, value] : v.items()) {
        bool known = false;
        for (const char* n : names) {
          known = known || name == n;
        }
        if (!known) {
          fail(std::string(where) + " has an unknown member '" + name + "'");
          return false;
        }
      }
    }
    return true;
  }

  std::string str(const json& obj, const char* name, std::string_view where) {
    const json& v = obj.at(name);
    if (!v.is_string()) {
      fail(std::string(where) + "." + name + " is not a string");
      return {};
    }
    return v.get<std::string>();
  }

  std::uint64_t u64(const json& obj, const char* name, std::string_view where) {
    const json& v = obj.at(name);
    if (!v.is_number_unsigned()) {
      fail(std::string(where) + "." + name + " is not a non-negative integer");
      return 0;
    }
    return v.get<std::uint64_t>();
  }

  std::int64_t i64(const json& obj, const char* name, std::string_view where) {
    const json& v = obj.at(name);
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))) {
      fail(std::string(where) + "." + name + " is not a 64-bit integer");
      return 0;
    }
    return v.get<std::int64_t>();
  }

  bool boolean(const json& obj, const char* name, std::string_view where) {
    const json& v = obj.at(name);
    if (!v.is_boolean()) {
      fail(std::string(where) + "." + name + " is not a boolean");
      return false;
    }
    return v.get<bool>();
  }

  std::map<std::string, std::string> string_map(const json& obj, const char* name) {
    std::map<std::string, std::string> out;
    const json& v = obj.at(name);
    if (!v.is_object()) {
      fail(std::string(name) + " is not an object");
      return out;
    }
    if (v.size() > k_passport_max_entries) {
      fail(std::string(name) + " has more than " + std::to_string(k_passport_max_entries) + " entries");
      return out;
    }
    for (const auto& [k, val] : v.items()) {
      if (!val.is_string()) {
        fail(std::string(name) + " holds a non-string value");
        return out;
      }
      out.emplace(k, val.get<std::string>());
    }
    return out;
  }

  bool ok() const noexcept { return error.empty(); }

  void fail(std::string why) {
    if (error.empty()) {
      error = std::move(why);
    }
  }
};

// Builds the document of `text` from nlohmann's SAX events and notes a member
// name repeated within one object (nlohmann keeps the last one silently; the
// grammar allows each once): an object that ends with fewer members than
// names were given had one twice. The callback parser this replaced cost a
// std::function call per event and a std::set of names per object: a third
// of a cache hit's passport read (docs/performance.md, "Process start").
class DocumentWithoutDuplicates {
 public:
  json root;
  bool duplicate = false;

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(json::number_integer_t v) { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return put(v); }
  bool number_float(json::number_float_t v, const std::string& /*text*/) { return put(v); }
  bool string(std::string& v) { return put(std::move(v)); }
  bool binary(json::binary_t& /*v*/) { return false; }  // never in JSON text
  bool start_object(std::size_t /*n*/) {
    m_open.push_back({place(json::object()), 0});
    return true;
  }
  bool key(std::string& name) {
    Open& o = m_open.back();
    ++o.names;
    m_slot = &(*o.value)[name];
    return true;
  }
  bool end_object() {
    if (m_open.back().value->size() != m_open.back().names) {
      duplicate = true;
    }
    m_open.pop_back();
    return true;
  }
  bool start_array(std::size_t /*n*/) {
    m_open.push_back({place(json::array()), 0});
    return true;
  }
  bool end_array() {
    m_open.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*at*/, const std::string& /*token*/, const nlohmann::detail::exception& /*e*/) {
    return false;
  }

 private:
  struct Open {
    json* value;        // an object or array being filled (stable: map nodes, and
                        // an array gets no new element while one of its own is open)
    std::size_t names;  // member names given so far (objects)
  };
  std::vector<Open> m_open;
  json* m_slot = nullptr;  // the member the last key() named

  json* place(json&& v) {
    if (m_open.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *m_open.back().value;
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *m_slot = std::move(v);
    return m_slot;
  }
  template <class T>
  bool put(T&& v) {
    place(json(std::forward<T>(v)));
    return true;
  }
};

// Parses `text` as JSON (discarded when it is not) and notes a repeated member name.
json parse_without_duplicates(std::string_view text, bool& duplicate) {
  DocumentWithoutDuplicates doc;
  if (!json::sax_parse(text, &doc)) {
    return json(json::value_t::discarded);
  }
  duplicate = doc.duplicate;
  return std::move(doc.root);
}

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
  // JSON text never holds a NUL byte (a string escapes it as \u0000), and
  // nlohmann's reader takes one for the end of its input: refused, so that
  // nothing can follow a passport unseen ("{...}\0GARBAGE").
  if (const void* nul = std::memchr(text.data(), '\0', text.size()); nul != nullptr) {
    return corrupt("a NUL byte at offset " +
                   std::to_string(static_cast<const char*>(nul) - text.data()) + " (JSON text holds none)");
  }
  bool duplicate = false;
  const json doc = parse_without_duplicates(text, duplicate);
  if (doc.is_discarded()) {
    return corrupt("not valid JSON");
  }
  if (!doc.is_object()) {
    return corrupt("not a JSON object");
  }
  // The version comes first: a passport of another version is refused whole,
  // before any other member is read (never a partial parse).
  const auto format = doc.find("format");
  if (format == doc.end()) {
    return corrupt("no member 'format'");
  }
  if (!format->is_number_unsigned()) {
    return corrupt("member 'format' is not a non-negative integer");
  }
  if (const auto v = format->get<std::uint64_t>(); v != static_cast<std::uint64_t>(k_passport_format_version)) {
    return make_error(v > static_cast<std::uint64_t>(k_passport_format_version) ? ErrorCode::unsupported
                                                                                : ErrorCode::corrupt,
                      "bad passport: format version " + std::to_string(v) + " is not supported (this kcache reads " +
                          std::to_string(k_passport_format_version) + ")");
  }
  if (duplicate) {
    return corrupt("a member appears twice in one object");
  }

  Reader r;
  if (!r.exact_object(doc, "the passport",
                      {"format", "key", "key_record", "kind", "producer", "target", "payload", "created_unix_ms",
                       "compile_duration_us", "log", "symbols", "labels"})) {
    return corrupt(r.error);
  }
  Passport p;
  p.format = k_passport_format_version;

  const std::string key_hex = r.str(doc, "key", "passport");
  if (!r.ok()) {
    return corrupt(r.error);
  }
  auto key = Key::parse(key_hex);
  if (!key) {
    return corrupt("member 'key' is not a 64-hex key");
  }
  p.key = *key;

  const json& rec = doc.at("key_record");
  if (!r.exact_object(rec, "key_record", {"schema", "domain", "fields"})) {
    return corrupt(r.error);
  }
  const std::uint64_t schema = r.u64(rec, "schema", "key_record");
  p.key_record.domain = r.str(rec, "domain", "key_record");
  if (!r.ok()) {
    return corrupt(r.error);
  }
  if (schema != k_key_schema_version) {
    return corrupt("key_record.schema " + std::to_string(schema) + " is not supported (this kcache reads " +
                   std::to_string(k_key_schema_version) + ")");
  }
  p.key_record.schema = static_cast<std::uint32_t>(schema);
  if (!is_valid_kind(p.key_record.domain)) {
    return corrupt("key_record.domain is not [a-z0-9_-]{1,32}");
  }
  const json& fields = rec.at("fields");
  if (!fields.is_array() || fields.empty() || fields.size() > k_passport_max_entries) {
    return corrupt("key_record.fields is not an array of 1 to " + std::to_string(k_passport_max_entries) +
                   " fields");
  }
  p.key_record.fields.reserve(fields.size());
  for (const auto& f : fields) {
    if (!r.exact_object(f, "a key_record field", {"name", "value", "digest"})) {
      return corrupt(r.error);
    }
    KeyField kf;
    kf.name = r.str(f, "name", "key_record field");
    kf.value = r.str(f, "value", "key_record field");
    kf.digested = r.boolean(f, "digest", "key_record field");
    if (!r.ok()) {
      return corrupt(r.error);
    }
    if (kf.name.empty()) {
      return corrupt("a key_record field has an empty name");
    }
    if (kf.digested && !Key::is_valid_hex(kf.value)) {
      return corrupt("key_record field '" + kf.name + "' has a malformed digest");
    }
    p.key_record.fields.push_back(std::move(kf));
  }

  p.kind = r.str(doc, "kind", "passport");
  if (r.ok() && !is_valid_kind(p.kind)) {
    return corrupt("member 'kind' is not [a-z0-9_-]{1,32}");
  }
  const json& prod = doc.at("producer");
  if (r.exact_object(prod, "producer", {"name", "version"})) {
    p.producer.name = r.str(prod, "name", "producer");
    p.producer.version = r.str(prod, "version", "producer");
  }
  const json& tgt = doc.at("target");
  if (r.exact_object(tgt, "target", {"arch", "host"})) {
    p.target.arch = r.str(tgt, "arch", "target");
    p.target.host = r.str(tgt, "host", "target");
  }
  const json& pay = doc.at("payload");
  if (r.exact_object(pay, "payload", {"size", "sha256"})) {
    p.payload_size = r.u64(pay, "size", "payload");
    p.payload_sha256 = r.str(pay, "sha256", "payload");
    if (r.ok() && !Key::is_valid_hex(p.payload_sha256)) {
      return corrupt("payload.sha256 is not 64 lowercase hex characters");
    }
  }
  p.created_unix_ms = r.i64(doc, "created_unix_ms", "passport");
  p.compile_duration_us = r.u64(doc, "compile_duration_us", "passport");
  p.log = r.str(doc, "log", "passport");
  p.symbols = r.string_map(doc, "symbols");
  p.labels = r.string_map(doc, "labels");
  if (!r.ok()) {
    return corrupt(r.error);
  }
  return p;
}

}  // namespace kcache
