#include "interpose/jit_result.hpp"

#include <cstring>

namespace kcache::interpose {

namespace {

constexpr std::string_view k_magic = "KCJITR01";

template <class T>
void put_int(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
  }
}

void put_bytes(std::string& out, std::string_view bytes) {
  put_int<std::uint64_t>(out, bytes.size());
  out.append(bytes);
}

void put_output(std::string& out, const JitOutput& o) {
  put_int<std::uint32_t>(out, static_cast<std::uint32_t>(o.size_rc));
  put_int<std::uint32_t>(out, static_cast<std::uint32_t>(o.get_rc));
  put_bytes(out, o.bytes);
}

// Reads from a bounded view; every read fails once anything is out of bounds.
class Reader {
 public:
  explicit Reader(std::string_view in) : m_in(in) {}
  template <class T>
  bool get_int(T& v) {
    if (m_in.size() < sizeof(T)) {
      return false;
    }
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      x |= static_cast<std::uint64_t>(static_cast<unsigned char>(m_in[i])) << (8 * i);
    }
    v = static_cast<T>(x);
    m_in.remove_prefix(sizeof(T));
    return true;
  }
  bool get_bytes(std::string& s) {
    std::uint64_t n = 0;
    if (!get_int(n) || n > m_in.size()) {
      return false;
    }
    s.assign(m_in.substr(0, n));
    m_in.remove_prefix(n);
    return true;
  }
  bool get_output(JitOutput& o) {
    std::uint32_t a = 0, b = 0;
    if (!get_int(a) || !get_int(b)) {
      return false;
    }
    o.size_rc = static_cast<std::int32_t>(a);
    o.get_rc = static_cast<std::int32_t>(b);
    return get_bytes(o.bytes);
  }
  bool skip(std::string_view prefix) {
    if (m_in.substr(0, prefix.size()) != prefix) {
      return false;
    }
    m_in.remove_prefix(prefix.size());
    return true;
  }
  bool done() const { return m_in.empty(); }
  std::size_t left() const { return m_in.size(); }

 private:
  std::string_view m_in;
};

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
  std::string out(k_magic);
  put_int<std::uint32_t>(out, static_cast<std::uint32_t>(result.compile_rc));
  for (const auto& o : result.outputs) {
    put_output(out, o);
  }
  put_output(out, result.log);
  put_int<std::uint32_t>(out, static_cast<std::uint32_t>(result.names.size()));
  for (const auto& n : result.names) {
    put_bytes(out, n.expression);
    put_int<std::uint32_t>(out, static_cast<std::uint32_t>(n.rc));
    put_bytes(out, n.lowered);
  }
  return out;
}

std::optional<JitResult> decode_jit_result(std::string_view bytes) {
  Reader r(bytes);
  JitResult result;
  std::uint32_t rc = 0;
  if (!r.skip(k_magic) || !r.get_int(rc)) {
    return std::nullopt;
  }
  result.compile_rc = static_cast<std::int32_t>(rc);
  for (auto& o : result.outputs) {
    if (!r.get_output(o)) {
      return std::nullopt;
    }
  }
  std::uint32_t n = 0;
  if (!r.get_output(result.log) || !r.get_int(n) || n > r.left() / 20) {  // a name takes at least 20 bytes
    return std::nullopt;
  }
  result.names.resize(n);
  for (auto& name : result.names) {
    std::uint32_t name_rc = 0;
    if (!r.get_bytes(name.expression) || !r.get_int(name_rc) || !r.get_bytes(name.lowered)) {
      return std::nullopt;
    }
    name.rc = static_cast<std::int32_t>(name_rc);
  }
  if (!r.done()) {
    return std::nullopt;
  }
  return result;
}

}  // namespace kcache::interpose
