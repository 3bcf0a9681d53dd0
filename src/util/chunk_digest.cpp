#include "util/chunk_digest.hpp"

#include <algorithm>
#include <array>

namespace kcache::util {

namespace {

// Adds `v` to `h` as 8 bytes, little-endian.
void add_le64(Xxh3& h, std::uint64_t v) noexcept {
  std::array<char, 8> b{};
  for (std::size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  h.update(b.data(), b.size());
}

}  // namespace

std::uint64_t combine_chunk_digests(const std::uint64_t* chunks, std::size_t count, std::uint64_t size) noexcept {
  Xxh3 outer;
  for (std::size_t i = 0; i < count; ++i) {
    add_le64(outer, chunks[i]);
  }
  add_le64(outer, size);
  return outer.digest();
}

std::uint64_t chunk_digest(std::string_view bytes) noexcept {
  if (bytes.size() < k_chunked_digest_min) {
    return xxh3_64(bytes);
  }
  ChunkDigest d(bytes.size());
  d.update(bytes.data(), bytes.size());
  return d.digest();
}

ChunkDigest::ChunkDigest(std::uint64_t total) noexcept : m_total(total), m_chunked(total >= k_chunked_digest_min) {}

void ChunkDigest::update(const void* data, std::size_t size) noexcept {
  const auto* p = static_cast<const char*>(data);
  if (!m_chunked) {
    m_chunk.update(p, size);
    return;
  }
  while (size > 0) {
    const std::size_t n = std::min(size, k_digest_chunk - m_in_chunk);
    m_chunk.update(p, n);
    m_in_chunk += n;
    p += n;
    size -= n;
    if (m_in_chunk == k_digest_chunk) {
      add_le64(m_outer, m_chunk.digest());
      m_chunk = Xxh3();
      m_in_chunk = 0;
    }
  }
}

std::uint64_t ChunkDigest::digest() const noexcept {
  if (!m_chunked) {
    return m_chunk.digest();
  }
  Xxh3 outer = m_outer;
  if (m_in_chunk != 0) {
    add_le64(outer, m_chunk.digest());
  }
  add_le64(outer, m_total);
  return outer.digest();
}

}  // namespace kcache::util
