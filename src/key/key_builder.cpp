#include "kcache/key_builder.hpp"

#include <cstring>
#include <map>
#include <utility>

#include "util/hex.hpp"
#include "util/sha256.hpp"

namespace kcache {

namespace {

constexpr char k_magic[] = "KCACHE-KEY";  // 10 characters + the NUL = 11 bytes

void put_u32(util::Sha256& h, std::uint32_t v) {
  std::uint8_t b[4];
  for (int i = 0; i < 4; ++i) {
    b[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  h.update(b, sizeof b);
}

void put_u64(util::Sha256& h, std::uint64_t v) {
  std::uint8_t b[8];
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  h.update(b, sizeof b);
}

}  // namespace

Result<Key> recompute_key(const KeyRecord& record) {
  util::Sha256 h;
  h.update(k_magic, sizeof k_magic);
  put_u32(h, record.schema);
  put_u32(h, static_cast<std::uint32_t>(record.domain.size()));
  h.update(record.domain);
  for (const auto& f : record.fields) {
    const char tag = f.digested ? 'd' : 'v';
    h.update(&tag, 1);
    put_u32(h, static_cast<std::uint32_t>(f.name.size()));
    h.update(f.name);
    if (f.digested) {
      const auto raw = Key::parse(f.value);
      if (!raw) {
        return make_error(ErrorCode::invalid_argument,
                          "key record field '" + f.name + "' holds no 64-hex digest");
      }
      put_u64(h, Key::k_size);
      h.update(raw->bytes().data(), Key::k_size);
    } else {
      put_u64(h, f.value.size());
      h.update(f.value);
    }
  }
  return Key(h.finish());
}

std::vector<KeyFieldDiff> diff(const KeyRecord& a, const KeyRecord& b) {
  std::vector<KeyFieldDiff> out;
  if (a.schema != b.schema) {
    out.push_back({"(schema)", std::to_string(a.schema), std::to_string(b.schema)});
  }
  if (a.domain != b.domain) {
    out.push_back({"(domain)", a.domain, b.domain});
  }
  // Match fields by (name, occurrence index) so repeated names (one per header,
  // say) pair up in order.
  using Slot = std::pair<std::string, int>;
  auto index = [](const KeyRecord& r) {
    std::map<Slot, const KeyField*> m;
    std::map<std::string, int> seen;
    for (const auto& f : r.fields) {
      m[{f.name, seen[f.name]++}] = &f;
    }
    return m;
  };
  const auto ia = index(a);
  const auto ib = index(b);
  // Walk a's order first, then what only b has, so output follows the record.
  std::map<std::string, int> seen;
  for (const auto& f : a.fields) {
    const Slot slot{f.name, seen[f.name]++};
    const auto it = ib.find(slot);
    if (it == ib.end()) {
      out.push_back({f.name, f.value, "", true, false});
    } else if (it->second->value != f.value || it->second->digested != f.digested) {
      out.push_back({f.name, f.value, it->second->value});
    }
  }
  seen.clear();
  for (const auto& f : b.fields) {
    const Slot slot{f.name, seen[f.name]++};
    if (!ia.contains(slot)) {
      out.push_back({f.name, "", f.value, false, true});
    }
  }
  return out;
}

KeyBuilder::KeyBuilder(std::string_view domain) { m_record.domain = std::string(domain); }

KeyBuilder& KeyBuilder::add(std::string_view name, std::string_view value) {
  m_record.fields.push_back({std::string(name), std::string(value), false});
  return *this;
}

KeyBuilder& KeyBuilder::add(std::string_view name, std::int64_t value) {
  return add(name, std::string_view(std::to_string(value)));
}

KeyBuilder& KeyBuilder::add_content(std::string_view name, std::string_view bytes) {
  return add_digest(name, util::sha256(bytes));
}

KeyBuilder& KeyBuilder::add_digest(std::string_view name,
                                   const std::array<std::uint8_t, 32>& sha256) {
  m_record.fields.push_back(
      {std::string(name), util::to_hex(sha256.data(), sha256.size()), true});
  return *this;
}

Key KeyBuilder::key() const {
  // Every digested field was produced by add_digest, so it always parses.
  return *recompute_key(m_record);
}

}  // namespace kcache
