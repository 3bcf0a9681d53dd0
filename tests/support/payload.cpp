#include "support/payload.hpp"

#include <cstring>

#include "kcache/key_builder.hpp"

namespace kcache::test {

namespace {

// splitmix64: small, fast, good enough to make every byte depend on the seed.
std::uint64_t next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void fill(std::uint64_t seed, char* out, std::size_t n) {
  std::uint64_t state = seed;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = next(state);
    std::memcpy(out + i, &v, 8);
  }
  if (i < n) {
    const std::uint64_t v = next(state);
    std::memcpy(out + i, &v, n - i);
  }
}

}  // namespace

std::string make_payload(std::uint64_t seed, std::size_t len) {
  if (len < k_payload_header) {
    len = k_payload_header;
  }
  std::string out(len, '\0');
  std::memcpy(out.data(), "KCTP\0\0\0\0", 8);
  std::memcpy(out.data() + 8, &seed, 8);
  const std::uint64_t l = len;
  std::memcpy(out.data() + 16, &l, 8);
  fill(seed, out.data() + k_payload_header, len - k_payload_header);
  return out;
}

std::optional<std::uint64_t> check_payload(std::string_view bytes) {
  if (bytes.size() < k_payload_header || std::memcmp(bytes.data(), "KCTP\0\0\0\0", 8) != 0) {
    return std::nullopt;
  }
  std::uint64_t seed = 0;
  std::uint64_t len = 0;
  std::memcpy(&seed, bytes.data() + 8, 8);
  std::memcpy(&len, bytes.data() + 16, 8);
  if (len != bytes.size() || make_payload(seed, bytes.size()) != bytes) {
    return std::nullopt;
  }
  return seed;
}

Key test_key(std::uint64_t key_seed) {
  return KeyBuilder("test").add("seed", static_cast<std::int64_t>(key_seed)).key();
}

Artifact make_artifact(std::uint64_t key_seed, std::uint64_t payload_seed, std::size_t len) {
  auto kb = KeyBuilder("test").add("seed", static_cast<std::int64_t>(key_seed));
  return Artifact::make(kb, "blob", make_payload(payload_seed, len), Producer{"kcache-test", "1"});
}

}  // namespace kcache::test
