// A seeded mutation loop over the bundle readers (inspect, verify), bounded
// in time: KCACHE_FUZZ_SECONDS (default 3) and KCACHE_FUZZ_SEED (default 1;
// a failure prints the seed and the mutant's number, and the mutant is kept
// in KCACHE_FUZZ_KEEP when that names a directory). The rules every mutant
// must keep are in bundle_fuzz.hpp. A libFuzzer target over the same rules
// is tests/fuzz/fuzz_bundle.cpp (built with -DKCACHE_FUZZERS=ON and clang).
#include "unit/bundle/bundle_fuzz.hpp"
#include "unit/bundle/bundle_test_util.hpp"

#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <random>
#include <string>

namespace kcache {
namespace {

using namespace kcache::bundle; // NOLINT(google-build-using-namespace)

// Values a field is set to: the edges of every bound a reader checks.
std::uint64_t interesting(std::mt19937_64& rng, std::uint64_t was, std::uint64_t size) {
  const std::uint64_t values[] = {0,        1,         was - 1,   was + 1,   was + 8,        was - 8,
                                  was + 4096, was - 4096, size,    size - 1,  size + 1,       size - 144,
                                  1ULL << 32, 1ULL << 40, 1ULL << 63, ~0ULL, ~0ULL - 63,   k_passport_max_bytes + 1};
  return values[rng() % std::size(values)];
}

// One mutation of `b` (a valid bundle's bytes, or an earlier mutant).
void mutate(std::string& b, std::mt19937_64& rng, std::uint64_t original_size) {
  if (b.empty()) {
    b.assign(1 + rng() % 300, static_cast<char>(rng()));
    return;
  }
  const std::uint64_t count = b.size() >= k_header_size ? load_u64(b.data() + k_header_count) : 0;
  const auto pick = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };
  switch (rng() % 10) {
    case 0:  // flip a bit anywhere
      b[pick(b.size())] ^= static_cast<char>(1U << (rng() % 8));
      break;
    case 1:  // a random byte anywhere
      b[pick(b.size())] = static_cast<char>(rng());
      break;
    case 2: {  // a header field
      const std::size_t fields[] = {k_header_version, k_header_alignment, k_header_count, k_header_index_offset,
                                    k_header_file_size, k_header_trailer_offset};
      const std::size_t at = fields[rng() % std::size(fields)];
      if (at + 8 <= b.size()) {
        store_u64(b.data() + at, interesting(rng, load_u64(b.data() + at), original_size));
      }
      break;
    }
    case 3: {  // a record field
      if (count > 0 && count < 1000) {
        const std::size_t at = k_header_size + pick(count) * k_record_size + 32 + 8 * (rng() % 4);
        if (at + 8 <= b.size()) {
          store_u64(b.data() + at, interesting(rng, load_u64(b.data() + at), original_size));
        }
      }
      break;
    }
    case 4:  // truncate
      b.resize(pick(b.size()));
      break;
    case 5:  // append
      b.append(1 + rng() % 64, static_cast<char>(rng() % 2 == 0 ? 0 : rng()));
      break;
    case 6: {  // insert bytes somewhere
      const std::size_t at = pick(b.size());
      b.insert(at, std::string(1 + rng() % 16, static_cast<char>(rng())));
      break;
    }
    case 7: {  // delete a range
      const std::size_t at = pick(b.size());
      b.erase(at, 1 + rng() % 64);
      break;
    }
    case 8: {  // swap two records
      if (count >= 2 && count < 1000 && k_header_size + count * k_record_size <= b.size()) {
        const std::size_t i = pick(count);
        const std::size_t j = pick(count);
        std::swap_ranges(b.begin() + static_cast<long>(k_header_size + i * k_record_size),
                         b.begin() + static_cast<long>(k_header_size + (i + 1) * k_record_size),
                         b.begin() + static_cast<long>(k_header_size + j * k_record_size));
      }
      break;
    }
    default: {  // a byte of JSON syntax inside a passport (a quote, a brace, a NUL)
      const char syntax[] = {'"', '{', '}', ',', ':', '\0', ' ', '\\', '0', 'e'};
      b[pick(b.size())] = syntax[rng() % std::size(syntax)];
      break;
    }
  }
}

TEST(BundleFuzz, EveryMutantIsRefusedOrIsTheOriginal) {
  const char* seconds_env = std::getenv("KCACHE_FUZZ_SECONDS");
  const char* seed_env = std::getenv("KCACHE_FUZZ_SEED");
  const double seconds = seconds_env != nullptr ? std::atof(seconds_env) : 3.0;
  const std::uint64_t seed = seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 1;
  test::TempDir dir;
  const auto key = dir.path() / "ci.key";
  const auto file = dir.path() / "fuzz.kcb";
  std::vector<Artifact> items = test::sample_artifacts();
  for (int i = 0; i < 3; ++i) {
    auto extra = make_blob("ltoir", std::string(100 + 900 * i, static_cast<char>('a' + i)), {{"n", std::to_string(i)}});
    ASSERT_TRUE(extra.has_value());
    items.push_back(std::move(*extra));
  }
  const BundleTrust trust = test::make_signed_bundle(key, file, items);
  const std::string original = test::read_file(file);
  ASSERT_TRUE(test::check_bundle_readers(file, original, original, trust).empty());
  ASSERT_TRUE(verify_bundle(file, trust).has_value());

  std::mt19937_64 rng(seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t mutants = 0;
  std::uint64_t accepted = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string b = original;
    for (unsigned n = 1 + rng() % 4; n > 0; --n) {
      mutate(b, rng, original.size());
    }
    test::write_file(file, b);
    const std::string broken = test::check_bundle_readers(file, b, original, trust);
    if (!broken.empty()) {
      if (const char* keep = std::getenv("KCACHE_FUZZ_KEEP")) {
        test::write_file(std::filesystem::path(keep) / ("mutant-" + std::to_string(mutants) + ".kcb"), b);
      }
      FAIL() << "seed " << seed << ", mutant " << mutants << ": " << broken;
    }
    accepted += b == original ? 1 : 0;
    ++mutants;
  }
  GTEST_LOG_(INFO) << mutants << " mutants in " << seconds << " s (seed " << seed << "), " << accepted
                   << " of them the original bytes again";
  EXPECT_GT(mutants, 100U) << "too few mutants to mean anything";
}

} // namespace
} // namespace kcache
