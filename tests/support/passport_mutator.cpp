#include "support/passport_mutator.hpp"

#include <vector>

#include <nlohmann/json.hpp>

#include "util/sha256.hpp"

namespace kcache::test {

namespace {

using nlohmann::json;

std::size_t below(std::mt19937_64& rng, std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); }

// Every node of `j` below the root, as JSON pointers.
void collect(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out.push_back(at / k);
      collect(v, at / k, out);
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      out.push_back(at / i);
      collect(j[i], at / i, out);
    }
  }
}

json other_type(std::mt19937_64& rng) {
  switch (below(rng, 10)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return 1.5;
    case 3: return "";
    case 4: return "x";
    case 5: return true;
    case 6: return nullptr;
    case 7: return json::array();
    case 8: return json::object();
    default: return 18446744073709551615ULL;
  }
}

json edited_value(const json& v, std::mt19937_64& rng) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s.empty() || below(rng, 3) == 0) {
      return s + "0";
    }
    s[below(rng, s.size())] ^= static_cast<char>(1 + below(rng, 31));
    return s;
  }
  if (v.is_boolean()) {
    return !v.get<bool>();
  }
  if (v.is_number_unsigned()) {
    return v.get<std::uint64_t>() + 1;
  }
  if (v.is_number_integer()) {
    return v.get<std::int64_t>() - 1;
  }
  if (v.is_object() || v.is_array()) {
    json e = v;
    e.clear();
    return e;
  }
  return other_type(rng);
}

std::string json_level(const Artifact& original, std::mt19937_64& rng, const char*& how) {
  json doc = json::parse(original.passport.to_json());
  std::vector<json::json_pointer> nodes;
  collect(doc, json::json_pointer(), nodes);
  const json::json_pointer at = nodes[below(rng, nodes.size())];
  json& parent = doc[at.parent_pointer()];
  switch (below(rng, 5)) {
    case 0:
      how = "member removed";
      if (parent.is_object()) {
        parent.erase(at.back());
      } else {
        parent.erase(static_cast<std::size_t>(std::stoul(at.back())));
      }
      break;
    case 1:
      how = "type changed";
      doc[at] = other_type(rng);
      break;
    case 2:
      how = "value edited";
      doc[at] = edited_value(doc[at], rng);
      break;
    case 3:
      how = "unknown member added";
      if (doc[at].is_object()) {
        doc[at]["x" + std::to_string(below(rng, 100))] = other_type(rng);
      } else if (parent.is_object()) {
        parent["unknown_" + at.back()] = doc[at];
      } else {
        parent.push_back(parent[0]);  // an array gains an element
      }
      break;
    default: {
      how = "member repeated";
      if (!parent.is_object()) {
        doc[at] = edited_value(doc[at], rng);
        break;
      }
      // Textual: nlohmann cannot hold a repeated member.
      const std::string name = at.back();
      const std::string text = doc.dump();
      const std::string needle = json(name).dump() + ":";
      const auto pos = text.find(needle);
      return text.substr(0, pos) + needle + edited_value(doc[at], rng).dump() + "," + text.substr(pos);
    }
  }
  return doc.dump(below(rng, 2) == 0 ? -1 : 2);
}

MutatedEntry forged(const Artifact& original, std::mt19937_64& rng) {
  MutatedEntry m;
  m.payload = std::string(original.payload);
  Passport p = original.passport;
  switch (below(rng, 7)) {
    case 0:
    case 1:
    case 2: {
      m.how = "payload swapped, payload.sha256 edited";
      m.payload = std::string(original.payload) + "!";
      m.payload[below(rng, original.payload.size())] ^= 0x20;
      p.payload_size = m.payload.size();
      p.payload_sha256 = util::sha256_hex(m.payload);
      const auto variant = below(rng, 3);
      if (variant >= 1) {
        m.how = "payload swapped, payload.sha256 and the record's digests edited";
        for (auto& f : p.key_record.fields) {
          if (f.digested) {
            f.value = p.payload_sha256;
          }
        }
      }
      if (variant == 2) {
        m.how = "payload swapped, record edited, key recomputed";
        p.key = *recompute_key(p.key_record);
      }
      m.passport_text = p.to_json();
      return m;
    }
    case 3: {
      m.how = "fields: []";
      json j = json::parse(p.to_json());
      j["key_record"]["fields"] = json::array();
      m.passport_text = j.dump();
      return m;
    }
    case 4: {
      m.how = "domain or schema missing";
      json j = json::parse(p.to_json());
      j["key_record"].erase(below(rng, 2) == 0 ? "domain" : "schema");
      m.passport_text = j.dump();
      return m;
    }
    case 5: {
      m.how = "producer or target member missing";
      json j = json::parse(p.to_json());
      const char* obj = below(rng, 2) == 0 ? "producer" : "target";
      j[obj].erase(j[obj].begin());
      m.passport_text = j.dump();
      return m;
    }
    default: {
      m.how = "unknown nested member";
      json j = json::parse(p.to_json());
      const char* obj[] = {"producer", "target", "payload", "key_record"};
      j[obj[below(rng, 4)]]["signature"] = "00";
      m.passport_text = j.dump();
      return m;
    }
  }
}

}  // namespace

MutatedEntry mutate_entry(const Artifact& original, std::mt19937_64& rng) {
  const std::string text = original.passport.to_json();
  MutatedEntry m;
  m.payload = std::string(original.payload);
  m.passport_text = text;
  const std::size_t pos = below(rng, text.size());
  switch (below(rng, 10)) {
    case 0:
    case 1:
      m.how = "bit flipped";
      m.passport_text[pos] ^= static_cast<char>(1u << below(rng, 8));
      return m;
    case 2:
      m.how = "byte replaced";
      m.passport_text[pos] = static_cast<char>(below(rng, 256));
      return m;
    case 3:
      m.how = "truncated";
      m.passport_text.resize(pos);
      return m;
    case 4: {
      m.how = "byte inserted";
      static constexpr char k_chars[] = "{}[],:\" 0123456789abcdef-.\\tnulre";
      m.passport_text.insert(pos, 1, k_chars[below(rng, sizeof k_chars - 1)]);
      return m;
    }
    case 5:
      m.how = "bytes deleted";
      m.passport_text.erase(pos, 1 + below(rng, 16));
      return m;
    case 6:
    case 7:
    case 8:
      m.passport_text = json_level(original, rng, m.how);
      return m;
    default: return forged(original, rng);
  }
}

Passport with_unkeyed_members_of(Passport p, const Passport& from) {
  p.producer = from.producer;
  p.target = from.target;
  p.created_unix_ms = from.created_unix_ms;
  p.compile_duration_us = from.compile_duration_us;
  p.log = from.log;
  p.symbols = from.symbols;
  p.labels = from.labels;
  return p;
}

}  // namespace kcache::test
