#include "interpose/jit_result.hpp"

#include <limits>

#include "util/wire_codec.hpp"

namespace kcache::interpose {

namespace {

constexpr std::string_view k_magic = "KCJITR01";

void put_output(wire::Writer& w, const JitOutput& o) {
  w.u32(static_cast<std::uint32_t>(o.size_rc));
  w.u32(static_cast<std::uint32_t>(o.get_rc));
  w.bytes(o.bytes);
}

// A length-prefixed string, bounded only by what is left of the record.
bool get_bytes(wire::Reader& r, std::string& out) { return r.bytes(out, std::numeric_limits<std::uint64_t>::max()); }

bool get_output(wire::Reader& r, JitOutput& o) {
  std::uint32_t a = 0, b = 0;
  if (!r.u32(a) || !r.u32(b)) {
    return false;
  }
  o.size_rc = static_cast<std::int32_t>(a);
  o.get_rc = static_cast<std::int32_t>(b);
  return get_bytes(r, o.bytes);
}

}  // namespace

const JitLoweredName* JitResult::lowered(std::string_view expression) const {
  for (const auto& n : names) {
    if (n.expression == expression) {
      return &n;
    }
  }
  return nullptr;
}

std::string encode(const JitResult& result) {
  wire::Writer w;
  w.raw(k_magic);
  w.u32(static_cast<std::uint32_t>(result.compile_rc));
  for (const auto& o : result.outputs) {
    put_output(w, o);
  }
  put_output(w, result.log);
  w.u32(static_cast<std::uint32_t>(result.names.size()));
  for (const auto& n : result.names) {
    w.bytes(n.expression);
    w.u32(static_cast<std::uint32_t>(n.rc));
    w.bytes(n.lowered);
  }
  return w.take();
}

std::optional<JitResult> decode_jit_result(std::string_view bytes) {
  wire::Reader r(bytes);
  JitResult result;
  std::string_view magic;
  std::uint32_t rc = 0;
  if (!r.raw(magic, k_magic.size()) || magic != k_magic || !r.u32(rc)) {
    return std::nullopt;
  }
  result.compile_rc = static_cast<std::int32_t>(rc);
  for (auto& o : result.outputs) {
    if (!get_output(r, o)) {
      return std::nullopt;
    }
  }
  std::uint32_t n = 0;
  if (!get_output(r, result.log) || !r.u32(n) || n > r.remaining() / 20) {  // a name takes at least 20 bytes
    return std::nullopt;
  }
  result.names.resize(n);
  for (auto& name : result.names) {
    std::uint32_t name_rc = 0;
    if (!get_bytes(r, name.expression) || !r.u32(name_rc) || !get_bytes(r, name.lowered)) {
      return std::nullopt;
    }
    name.rc = static_cast<std::int32_t>(name_rc);
  }
  if (!r.at_end()) {
    return std::nullopt;
  }
  return result;
}

}  // namespace kcache::interpose
