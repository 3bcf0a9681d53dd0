// util::chunk_digest, the fast check's digest of a file-store payload: xxh3_64
// below 1 MiB, the documented chunked form from there (docs/on-disk-format.md,
// "Reading"), the same whether computed at once or piece by piece.
#include "util/chunk_digest.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "util/sha256.hpp"

namespace kcache::util {
namespace {

std::string pattern(std::size_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (auto& c : out) {
    c = static_cast<char>(rng());
  }
  return out;
}

// The definition, written out independently of the code under test.
std::uint64_t by_the_definition(const std::string& bytes) {
  if (bytes.size() < k_chunked_digest_min) {
    return xxh3_64(bytes);
  }
  std::string stream;
  auto le = [&stream](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      stream.push_back(static_cast<char>(v >> (8 * i)));
    }
  };
  for (std::size_t at = 0; at < bytes.size(); at += k_digest_chunk) {
    le(xxh3_64(std::string_view(bytes).substr(at, k_digest_chunk)));
  }
  le(bytes.size());
  return xxh3_64(stream);
}

TEST(ChunkDigest, IsXxh3BelowOneMebibyteAndTheChunkedFormFromThere) {
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, k_digest_chunk, k_chunked_digest_min - 1,
                                 k_chunked_digest_min, k_chunked_digest_min + 1, 3 * k_digest_chunk + 5 + k_chunked_digest_min,
                                 (std::size_t{4} << 20) + 13}) {
    const std::string bytes = pattern(size, static_cast<std::uint32_t>(size));
    EXPECT_EQ(chunk_digest(bytes), by_the_definition(bytes)) << size;
    if (size < k_chunked_digest_min) {
      EXPECT_EQ(chunk_digest(bytes), xxh3_64(bytes)) << size;
    }
  }
}

TEST(ChunkDigest, PieceByPieceEqualsAtOnceWhateverThePieces) {
  std::mt19937 rng(42);
  for (const std::size_t size : {std::size_t{0}, std::size_t{1000}, k_chunked_digest_min - 1, k_chunked_digest_min,
                                 (std::size_t{2} << 20) + 4097}) {
    const std::string bytes = pattern(size, 9);
    for (int round = 0; round < 4; ++round) {
      ChunkDigest d(size);
      std::size_t at = 0;
      while (at < size) {
        // Pieces from 1 byte to past a chunk, crossing chunk boundaries.
        const std::size_t n = std::min<std::size_t>(size - at, 1 + rng() % (round == 0 ? 7 : k_digest_chunk + 300));
        d.update(bytes.data() + at, n);
        at += n;
      }
      EXPECT_EQ(d.digest(), chunk_digest(bytes)) << size << " round " << round;
    }
  }
}

TEST(ChunkDigest, AChangedByteOrLengthChangesTheDigest) {
  std::string bytes = pattern((std::size_t{2} << 20) + 3, 5);
  const std::uint64_t before = chunk_digest(bytes);
  bytes[k_digest_chunk + 17] ^= 1;  // in the second chunk
  EXPECT_NE(chunk_digest(bytes), before);
  bytes[k_digest_chunk + 17] ^= 1;
  bytes.push_back('\0');
  EXPECT_NE(chunk_digest(bytes), before);
}

}  // namespace
}  // namespace kcache::util
