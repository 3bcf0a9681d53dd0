// The read-only bundle tier: hits from the mapped file, nothing written,
// bundles that fail their checks skipped with one warning.
#include "bundle/bundle_store.hpp"
#include "kcache/config.hpp"
#include "kcache/file_store.hpp"
#include "kcache/tiered_store.hpp"
#include "unit/bundle/bundle_test_util.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <unistd.h>

namespace kcache {
namespace {

using test::read_file;

class BundleTier : public test::SignedBundleTest {
protected:
  std::unique_ptr<bundle::BundleStore> open_tier(const std::vector<std::filesystem::path>& files) {
    return bundle::BundleStore::open(files, trust, ReadVerify::fast_when_unchanged,
                                     [this](const std::string& line) { warnings.push_back(line); });
  }

  // Overwrites one byte of the bundle in place (same inode, as a careless
  // process would), at the payload of the entry with the 4096-byte payload.
  void scribble_on_payload() {
    const std::string bytes = read_file(bundle());
    for (std::size_t i = 0; i < 3; ++i) {
      const char* r = bytes.data() + bundle::k_header_size + i * bundle::k_record_size;
      if (bundle::load_u64(r + bundle::k_record_payload_size) == 4096) {
        const auto off = static_cast<off_t>(bundle::load_u64(r + bundle::k_record_payload_offset));
        const int fd = ::open(bundle().c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, "Z", 1, off + 7), 1);
        ::close(fd);
        big = artifacts[0].passport.key;
        for (const auto& a : artifacts) {
          if (a.payload.size() == 4096) {
            big = a.passport.key;
          }
        }
        return;
      }
    }
    FAIL() << "no 4096-byte payload in the sample bundle";
  }

  std::vector<std::string> warnings;
  Key big;
};

TEST_F(BundleTier, HitsShareTheMappingAndMatchTheEntries) {
  auto tier = open_tier({bundle()});
  EXPECT_EQ(tier->bundles_in_use(), 1U);
  for (const Artifact& a : artifacts) {
    auto first = tier->get(a.passport.key);
    auto second = tier->get(a.passport.key);
    ASSERT_TRUE(first.has_value() && first->has_value()) << a.passport.key.hex();
    ASSERT_TRUE(second.has_value() && second->has_value());
    EXPECT_EQ((*first)->payload, a.payload);
    EXPECT_EQ((*first)->passport, a.passport);
    EXPECT_EQ((*first)->payload.c_str()[a.payload.size()], '\0');
    // Both hits point into the one mapping: nothing was copied.
    EXPECT_TRUE((*first)->payload.shares_with((*second)->payload) || a.payload.empty());
  }
  auto miss = tier->get(Key::parse(std::string(64, 'a')).value());
  ASSERT_TRUE(miss.has_value());
  EXPECT_FALSE(miss->has_value());
  auto stats = tier->stats();
  EXPECT_EQ(stats->hits, 6U);
  EXPECT_EQ(stats->misses, 1U);
  EXPECT_EQ(stats->entries, 3U);
  EXPECT_FALSE(tier->writable());
  EXPECT_FALSE(tier->put(artifacts[0]).has_value());
  EXPECT_TRUE(warnings.empty());
}

TEST_F(BundleTier, TheConfiguredChainServesFromTheBundleAndWritesNothing) {
  test::TempDir elsewhere;
  const auto cache_dir = elsewhere.path() / "cache";
  std::map<std::string, std::string> env{{"KCACHE_DIR", cache_dir.string()},
                                         {"KCACHE_BUNDLES", bundle().string()},
                                         {"KCACHE_BUNDLE_TRUSTED_KEYS", key().string() + ".pub"},
                                         {"KCACHE_PUT", "sync"},
                                         {"HOME", m_dir.path().string()}};
  ConfigInputs inputs;
  inputs.getenv = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  inputs.config_file = m_dir.path() / "none.toml";
  test::write_file(inputs.config_file, "");
  auto config = Config::load_from(inputs);
  ASSERT_TRUE(config.has_value()) << config.error().describe();
  ASSERT_EQ(config->bundles.size(), 1U);
  const std::set<std::filesystem::path> before{std::filesystem::directory_iterator(m_dir.path()),
                                               {}};
  const std::string bundle_bytes = read_file(bundle());
  {
    auto store = open_configured_store(*config);
    ASSERT_TRUE(store.has_value()) << store.error().describe();
    for (const Artifact& a : artifacts) {
      auto got = (*store)->get(a.passport.key);
      ASSERT_TRUE(got.has_value() && got->has_value());
      EXPECT_EQ((*got)->payload, a.payload);
      EXPECT_EQ(TieredStore::last_hit_tier(), 1)
          << "memory is tier 0, the bundle tier 1, the disk 2";
    }
  }
  // Nothing was copied to the disk tier, nothing appeared beside the bundle,
  // and the bundle is unchanged.
  auto disk = FileStore::open(config->file_store_options());
  ASSERT_TRUE(disk.has_value());
  EXPECT_TRUE((*disk)->list()->empty());
  const std::set<std::filesystem::path> after{std::filesystem::directory_iterator(m_dir.path()),
                                              {}};
  EXPECT_EQ(after, before);
  EXPECT_EQ(read_file(bundle()), bundle_bytes);
}

TEST_F(BundleTier, UntrustedOrDamagedBundlesAreSkippedWithOneWarningEach) {
  const auto other_key = m_dir.path() / "other.key";
  ASSERT_TRUE(generate_bundle_keys(other_key, other_key.string() + ".pub").has_value());
  const auto untrusted = m_dir.path() / "untrusted.kcb";
  ASSERT_TRUE(create_bundle(untrusted, artifacts, BundleCreateOptions{other_key}).has_value());
  const auto truncated = m_dir.path() / "truncated.kcb";
  std::string bytes = read_file(bundle());
  bytes.resize(bytes.size() - 10);
  test::write_file(truncated, bytes);
  auto tier = open_tier({untrusted, truncated, m_dir.path() / "missing.kcb", bundle()});
  EXPECT_EQ(tier->bundles_in_use(), 1U);
  ASSERT_EQ(warnings.size(), 3U);
  EXPECT_NE(warnings[0].find("(untrusted-key)"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("(truncated)"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("does not exist"), std::string::npos) << warnings[2];
  auto got = tier->get(artifacts[0].passport.key);
  ASSERT_TRUE(got.has_value() && got->has_value());
}

TEST_F(BundleTier, APayloadChangedUnderTheMappingIsAMissAndRefusesTheBundle) {
  auto tier = open_tier({bundle()});
  scribble_on_payload();
  auto got = tier->get(big);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value()) << "a changed payload was returned";
  EXPECT_EQ(tier->stats()->corrupt, 1U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("(payload-mismatch)"), std::string::npos) << warnings[0];
  // The bundle is trusted as a whole or not at all: its other entries miss too.
  EXPECT_EQ(tier->bundles_in_use(), 0U);
  for (const Artifact& a : artifacts) {
    auto other = tier->get(a.passport.key);
    ASSERT_TRUE(other.has_value());
    EXPECT_FALSE(other->has_value());
  }
}

TEST_F(BundleTier, APayloadChangedAfterItsFirstHitIsCaughtByTheFastCheck) {
  auto tier = open_tier({bundle()});
  for (const Artifact& a : artifacts) {
    ASSERT_TRUE(tier->get(a.passport.key)->has_value());
  }
  scribble_on_payload();
  auto got = tier->get(big);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value()) << "a payload changed after its first hit was returned";
  EXPECT_EQ(tier->stats()->corrupt, 1U);
}

} // namespace
} // namespace kcache
