// Remembered bundle verdicts: a bundle that passed every check is opened by
// later processes without hashing its metadata or parsing every passport, and
// nothing a writer can do to the file, nor a forged verdict, serves a byte
// that was not checked.
#include "bundle/bundle_file.hpp"
#include "bundle/bundle_store.hpp"
#include "bundle/bundle_verdicts.hpp"
#include "unit/bundle/bundle_test_util.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace kcache {
namespace {

using test::read_file;
using test::write_file;

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

class BundleVerdictTest : public test::SignedBundleTest {
protected:
  bundle::BundleVerdicts verdicts() const { return bundle::BundleVerdicts(dir() / "verdicts"); }

  std::unique_ptr<bundle::BundleStore> open_tier() {
    return bundle::BundleStore::open({bundle()}, trust, ReadVerify::fast_when_unchanged,
                                     [this](const std::string& line) { warnings.push_back(line); }, verdicts());
  }

  // Records a verdict for the bundle file as it is now, as a process would
  // once its times have settled (the clock moved 10 s on).
  void remember_now() {
    auto file = bundle::BundleFile::open(bundle());
    ASSERT_TRUE(file.has_value()) << file.error().describe();
    struct stat st {};
    ASSERT_EQ(::stat(bundle().c_str(), &st), 0);
    verdicts().remember((*file)->seal(), st, now_ns() + 10'000'000'000);
    ASSERT_TRUE(verdicts().holds((*file)->seal()));
  }

  bool remembered_open() {
    auto file = bundle::BundleFile::open(bundle(), &m_verdicts);
    return file.has_value() && (*file)->remembered();
  }

  std::size_t verdict_files() const {
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir() / "verdicts", ec);
         !ec && it != std::filesystem::directory_iterator(); ++it) {
      ++n;
    }
    return n;
  }

  // The offset of the passport of the entry whose payload is `size` bytes.
  std::uint64_t passport_of_payload(std::uint64_t size) const {
    const std::string bytes = read_file(bundle());
    for (std::uint64_t i = 0; i < artifacts.size(); ++i) {
      const char* r = bytes.data() + bundle::k_header_size + i * bundle::k_record_size;
      if (bundle::load_u64(r + bundle::k_record_payload_size) == size) {
        return bundle::load_u64(r + bundle::k_record_passport_offset);
      }
    }
    ADD_FAILURE() << "no payload of " << size << " bytes";
    return 0;
  }

  void expect_all_hits(bundle::BundleStore& tier) {
    for (const Artifact& a : artifacts) {
      auto hit = tier.get(a.passport.key);
      ASSERT_TRUE(hit.has_value() && hit->has_value()) << a.passport.key.hex();
      EXPECT_EQ((*hit)->payload, a.payload);
      EXPECT_EQ((*hit)->passport, a.passport);
      EXPECT_EQ((*hit)->payload.c_str()[a.payload.size()], '\0');
    }
  }

  bundle::BundleVerdicts m_verdicts{std::filesystem::path()};
  std::vector<std::string> warnings;
};

TEST_F(BundleVerdictTest, AFreshFileIsNotRememberedASettledOneIs) {
  // Just written: its times are within the settle window, so a write in the
  // same clock tick could hide under a verdict; nothing is kept.
  auto tier = open_tier();
  ASSERT_EQ(tier->bundles_in_use(), 1U);
  EXPECT_EQ(verdict_files(), 0U);
  // Once its times are older than the window, the next full check is kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(bundle::BundleVerdicts::k_settle_seconds * 1000 + 200));
  tier = open_tier();
  EXPECT_EQ(verdict_files(), 1U);
  m_verdicts = verdicts();
  EXPECT_TRUE(remembered_open());
  tier = open_tier();
  ASSERT_EQ(tier->bundles_in_use(), 1U);
  expect_all_hits(*tier);
  auto listed = tier->list();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->size(), artifacts.size());
  EXPECT_EQ(tier->stats()->entries, artifacts.size());
  EXPECT_TRUE(warnings.empty());
}

TEST_F(BundleVerdictTest, ARememberedBundleStillNeedsATrustedSigner) {
  remember_now();
  trust = BundleTrust{};
  auto tier = open_tier();
  EXPECT_EQ(tier->bundles_in_use(), 0U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("untrusted-key"), std::string::npos) << warnings[0];
}

TEST_F(BundleVerdictTest, AnyWriteToTheFileForgetsTheVerdict) {
  remember_now();
  m_verdicts = verdicts();
  ASSERT_TRUE(remembered_open());
  // One byte of a passport changed in place, then back: the bytes are the
  // same, but the file is not the one checked (its status-change time moved).
  const auto at = static_cast<off_t>(passport_of_payload(4096) + 3);
  const int fd = ::open(bundle().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, at), 1);
  const char other = c == 'x' ? 'y' : 'x';
  ASSERT_EQ(::pwrite(fd, &other, 1, at), 1);
  ::close(fd);
  EXPECT_FALSE(remembered_open());
  auto tier = open_tier();
  EXPECT_EQ(tier->bundles_in_use(), 0U);  // checked in full: the digest no longer matches
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("digest-mismatch"), std::string::npos) << warnings[0];
}

TEST_F(BundleVerdictTest, AReplacedFileIsCheckedInFull) {
  remember_now();
  // Another, validly signed bundle moved over the remembered one: a new
  // inode, so no verdict; it is checked in full and used.
  const auto others = std::vector<Artifact>{artifacts[0]};
  auto made = create_bundle(dir() / "new.kcb", others, BundleCreateOptions{key()});
  ASSERT_TRUE(made.has_value());
  std::filesystem::rename(dir() / "new.kcb", bundle());
  m_verdicts = verdicts();
  EXPECT_FALSE(remembered_open());
  auto tier = open_tier();
  ASSERT_EQ(tier->bundles_in_use(), 1U);
  EXPECT_TRUE(tier->get(artifacts[0].passport.key)->has_value());
  EXPECT_FALSE(tier->get(artifacts[1].passport.key)->has_value());
}

TEST_F(BundleVerdictTest, AForgedVerdictServesNoUncheckedEntry) {
  // Someone who can write the verdict directory records a verdict for a
  // bundle whose passport and payload were changed after signing. The
  // entries are still checked one by one when first served: the changed
  // passport is refused, the changed payload fails its hash, and the bundle
  // is not used from then on.
  const std::string original = read_file(bundle());
  std::string bytes = original;
  const std::uint64_t passport = passport_of_payload(4096);
  bytes[passport + 1] = ' ';  // no longer the one canonical encoding
  write_file(bundle(), bytes);
  {
    auto file = bundle::BundleFile::open(bundle());
    ASSERT_FALSE(file.has_value());  // a full check refuses it
  }
  // Forge: a verdict with this file's seal.
  {
    std::string trailer(original.data() + original.size() - bundle::k_trailer_size + bundle::k_trailer_digest, 128);
    struct stat st {};
    ASSERT_EQ(::stat(bundle().c_str(), &st), 0);
    const auto seal = bundle::BundleSeal::of(
        st, util::to_hex(reinterpret_cast<const std::uint8_t*>(trailer.data()), trailer.size()));
    verdicts().remember(seal, st, now_ns() + 10'000'000'000);
  }
  m_verdicts = verdicts();
  ASSERT_TRUE(remembered_open());
  auto tier = open_tier();
  ASSERT_EQ(tier->bundles_in_use(), 1U);
  Key changed;
  for (const auto& a : artifacts) {
    if (a.payload.size() == 4096) {
      changed = a.passport.key;
    }
  }
  auto got = tier->get(changed);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(tier->bundles_in_use(), 0U);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("entry-mismatch"), std::string::npos) << warnings[0];
  for (const auto& a : artifacts) {
    EXPECT_FALSE(tier->get(a.passport.key)->has_value());  // trusted as a whole or not at all
  }
}

TEST_F(BundleVerdictTest, AForgedVerdictOverAChangedPayloadIsAMiss) {
  std::string bytes = read_file(bundle());
  std::uint64_t off = 0;
  Key changed;
  for (std::uint64_t i = 0; i < artifacts.size(); ++i) {
    const char* r = bytes.data() + bundle::k_header_size + i * bundle::k_record_size;
    if (bundle::load_u64(r + bundle::k_record_payload_size) == 4096) {
      off = bundle::load_u64(r + bundle::k_record_payload_offset);
    }
  }
  for (const auto& a : artifacts) {
    if (a.payload.size() == 4096) {
      changed = a.passport.key;
    }
  }
  ASSERT_NE(off, 0U);
  bytes[off + 5] = 'Z';  // payloads are outside the digest: a full open accepts it, the hit does not
  write_file(bundle(), bytes);
  remember_now();
  auto tier = open_tier();
  ASSERT_EQ(tier->bundles_in_use(), 1U);
  auto got = tier->get(changed);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(tier->stats()->corrupt, 1U);
}

TEST_F(BundleVerdictTest, ADamagedVerdictFileIsNoVerdict) {
  remember_now();
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir() / "verdicts")) {
    if (f.path().filename() == "verdict") {
      files.push_back(f.path());
    }
  }
  ASSERT_EQ(files.size(), 1U);
  const std::string good = read_file(files[0]);
  std::string text = good;
  text[text.size() - 3] = text[text.size() - 3] == '0' ? '1' : '0';
  write_file(files[0], text);
  m_verdicts = verdicts();
  EXPECT_FALSE(remembered_open());
  // A symlink in its place, to a true verdict, is not followed.
  const auto target = dir() / "elsewhere";
  write_file(target, good);
  std::filesystem::remove(files[0]);
  std::filesystem::create_symlink(target, files[0]);
  EXPECT_FALSE(remembered_open());
}

TEST_F(BundleVerdictTest, PayloadsCheckedOnceAreCheckedCheaplyAfterwardsUntilTheFileChanges) {
  remember_now();
  {
    auto tier = open_tier();  // hashes each payload in full and records it
    expect_all_hits(*tier);
  }
  {
    auto tier = open_tier();  // XXH3 against those records
    expect_all_hits(*tier);
    EXPECT_EQ(tier->stats()->corrupt, 0U);
  }
  // A payload byte changed in place: the file's times move, so neither the
  // verdict nor the records hold; the open checks in full (payloads are not
  // in the digest) and the hit hashes in full: a miss.
  std::string bytes = read_file(bundle());
  Key changed;
  for (std::uint64_t i = 0; i < artifacts.size(); ++i) {
    const char* r = bytes.data() + bundle::k_header_size + i * bundle::k_record_size;
    if (bundle::load_u64(r + bundle::k_record_payload_size) == 4096) {
      const auto off = static_cast<off_t>(bundle::load_u64(r + bundle::k_record_payload_offset));
      const int fd = ::open(bundle().c_str(), O_WRONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::pwrite(fd, "Z", 1, off + 9), 1);
      ::close(fd);
    }
  }
  for (const auto& a : artifacts) {
    if (a.payload.size() == 4096) {
      changed = a.passport.key;
    }
  }
  m_verdicts = verdicts();
  EXPECT_FALSE(remembered_open());
  auto tier = open_tier();
  auto got = tier->get(changed);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(tier->stats()->corrupt, 1U);
}

TEST_F(BundleVerdictTest, NoVerdictDirectoryRemembersNothing) {
  const bundle::BundleVerdicts none{std::filesystem::path()};
  auto file = bundle::BundleFile::open(bundle());
  ASSERT_TRUE(file.has_value());
  struct stat st {};
  ASSERT_EQ(::stat(bundle().c_str(), &st), 0);
  none.remember((*file)->seal(), st, now_ns() + 10'000'000'000);
  EXPECT_FALSE(none.holds((*file)->seal()));
}

}  // namespace
}  // namespace kcache
