// Bundles: create, verify, inspect and install (kcache/bundle.hpp), and the
// refusal of a bundle changed anywhere.
#include "bundle/bundle_format.hpp"
#include "kcache/file_store.hpp"
#include "unit/bundle/bundle_test_util.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>

namespace kcache {
namespace {

using test::read_file;
using test::write_file;

class Bundles : public ::testing::Test {
protected:
  void SetUp() override {
    artifacts = test::sample_artifacts();
    trust = test::make_signed_bundle(key(), bundle(), artifacts);
    ASSERT_EQ(trust.keys.size(), 1U);
    auto made =
        create_bundle(bundle(), artifacts, BundleCreateOptions{key()}); // the same bytes again
    ASSERT_TRUE(made.has_value()) << made.error().describe();
    summary = *made;
  }
  std::filesystem::path key() const { return m_dir.path() / "ci.key"; }
  std::filesystem::path bundle() const { return m_dir.path() / "kernels.kcb"; }
  std::filesystem::path dir() const { return m_dir.path(); }

  // A FileStore in its own directory under the test's.
  std::unique_ptr<FileStore> cache(const std::string& name) {
    FileStoreOptions o;
    o.root = dir() / name;
    auto s = FileStore::open(o);
    EXPECT_TRUE(s.has_value());
    return std::move(*s);
  }

  test::TempDir m_dir;
  BundleTrust trust;
  std::vector<Artifact> artifacts;
  BundleSummary summary;
};

TEST_F(Bundles, RoundTripKeepsEveryEntryByteForByte) {
  EXPECT_EQ(summary.entries, 3U);
  EXPECT_EQ(summary.signer_id, trust.keys[0].id());
  auto info = verify_bundle(bundle(), trust);
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  ASSERT_EQ(info->entries.size(), 3U);
  EXPECT_TRUE(info->is_signed);
  EXPECT_EQ(info->digest_hex, summary.digest_hex);
  auto target = cache("installed");
  auto report = install_bundle(bundle(), trust, *target);
  ASSERT_TRUE(report.has_value()) << report.error().describe();
  EXPECT_EQ(report->entries, 3U);
  EXPECT_EQ(report->stored, 3U);
  EXPECT_EQ(report->bytes, summary.payload_bytes);
  for (const Artifact& a : artifacts) {
    auto got = target->get(a.passport.key);
    ASSERT_TRUE(got.has_value() && got->has_value()) << a.passport.key.hex();
    EXPECT_EQ((*got)->payload, a.payload);
    EXPECT_EQ((*got)->passport, a.passport);
  }
  // Installing again stores nothing new.
  auto again = install_bundle(bundle(), trust, *target);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->stored, 0U);
  EXPECT_EQ(again->already_present, 3U);
}

TEST_F(Bundles, SameEntriesGiveIdenticalBytesWhateverTheirOrder) {
  std::vector<Artifact> reversed(artifacts.rbegin(), artifacts.rend());
  reversed.push_back(artifacts[0]); // a duplicate is dropped
  const auto other = dir() / "again.kcb";
  ASSERT_TRUE(create_bundle(other, reversed, BundleCreateOptions{key()}).has_value());
  EXPECT_EQ(read_file(other), read_file(bundle()));
}

TEST_F(Bundles, PayloadsAreRawAlignedAndFollowedByAZero) {
  const std::string bytes = read_file(bundle());
  for (std::size_t i = 0; i < 3; ++i) {
    const char* r = bytes.data() + bundle::k_header_size + i * bundle::k_record_size;
    const std::uint64_t off = bundle::load_u64(r + bundle::k_record_payload_offset);
    const std::uint64_t size = bundle::load_u64(r + bundle::k_record_payload_size);
    EXPECT_EQ(off % 4096, 0U);
    EXPECT_EQ(bytes[off + size], '\0');
    Key::Bytes kb{};
    std::memcpy(kb.data(), r, kb.size());
    const auto a = std::find_if(artifacts.begin(), artifacts.end(),
                                [&](const Artifact& x) { return x.passport.key == Key(kb); });
    ASSERT_NE(a, artifacts.end());
    EXPECT_EQ(bytes.substr(off, size), a->payload.view());
  }
}

// Flips one byte at `offset` (or truncates / appends) and expects every
// reader to refuse the bundle with `reason` and install nothing.
struct Tamper {
  const char* what;
  std::function<void(std::string&)> edit;
  const char* reason;
};

TEST_F(Bundles, ChangedAnywhereIsRefusedWithANamedReasonAndInstallsNothing) {
  const std::string good = read_file(bundle());
  using namespace bundle; // NOLINT(google-build-using-namespace)
  const std::uint64_t trailer = good.size() - k_trailer_size;
  const auto record = [](std::size_t i) { return k_header_size + i * k_record_size; };
  const std::uint64_t passport0 = load_u64(good.data() + record(0) + k_record_passport_offset);
  // The entry with the 4096-byte payload.
  std::uint64_t payload1 = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    if (load_u64(good.data() + record(i) + k_record_payload_size) == 4096) {
      payload1 = load_u64(good.data() + record(i) + k_record_payload_offset);
    }
  }
  ASSERT_NE(payload1, 0U);
  const auto flip = [](std::uint64_t at) {
    return [at](std::string& b) { b[at] = static_cast<char>(b[at] ^ 0x20); };
  };
  const std::vector<Tamper> cases{
      {"header magic", flip(0), "bad-header"},
      {"header version", [](std::string& b) { b[k_header_version] = 2; }, "bad-header"},
      {"header entry count", [](std::string& b) { b[k_header_count] = 2; }, "bad-index"},
      {"index key", flip(record(1) + 5), "digest-mismatch"},
      {"index key order",
       [&](std::string& b) {
         std::swap_ranges(b.begin() + record(0), b.begin() + record(0) + 32, b.begin() + record(1));
       },
       "bad-index"},
      {"index payload size", flip(record(0) + k_record_payload_size), "bad-index"},
      {"passport byte", flip(passport0 + 20), "digest-mismatch"},
      {"padding byte", [&](std::string& b) { b[payload1 - 1] = 1; }, "bad-entry"},
      {"payload byte", flip(payload1 + 100), "payload-mismatch"},
      {"trailer digest", flip(trailer + k_trailer_digest), "digest-mismatch"},
      {"signature", flip(trailer + k_trailer_signature + 3), "bad-signature"},
      {"public key", flip(trailer + k_trailer_public_key), "untrusted-key"},
      {"trailing bytes", [](std::string& b) { b += '\0'; }, "trailing-bytes"},
      {"truncated by one byte", [](std::string& b) { b.pop_back(); }, "truncated"},
      {"truncated to half", [](std::string& b) { b.resize(b.size() / 2); }, "truncated"},
      {"truncated to nothing", [](std::string& b) { b.clear(); }, "truncated"},
  };
  for (const Tamper& t : cases) {
    std::string bytes = good;
    t.edit(bytes);
    write_file(bundle(), bytes);
    auto verified = verify_bundle(bundle(), trust);
    ASSERT_FALSE(verified.has_value()) << t.what;
    EXPECT_EQ(bundle_refusal(verified.error()), t.reason)
        << t.what << ": " << verified.error().message;
    auto target = cache(std::string("cache-") + std::to_string(&t - cases.data()));
    auto installed = install_bundle(bundle(), trust, *target);
    ASSERT_FALSE(installed.has_value()) << t.what;
    EXPECT_EQ(bundle_refusal(installed.error()), t.reason) << t.what;
    EXPECT_TRUE(target->list()->empty())
        << t.what << ": an entry was installed from a refused bundle";
  }
}

TEST_F(Bundles, UnsignedAndUntrustedBundlesAreRefused) {
  ASSERT_TRUE(create_bundle(bundle(), artifacts).has_value());
  auto unsigned_bundle = verify_bundle(bundle(), trust);
  ASSERT_FALSE(unsigned_bundle.has_value());
  EXPECT_EQ(bundle_refusal(unsigned_bundle.error()), "unsigned");
  EXPECT_EQ(unsigned_bundle.error().code, ErrorCode::permission_denied);

  const auto other_key = dir() / "other.key";
  auto other = generate_bundle_keys(other_key, other_key.string() + ".pub");
  ASSERT_TRUE(other.has_value());
  ASSERT_TRUE(create_bundle(bundle(), artifacts, BundleCreateOptions{other_key}).has_value());
  auto untrusted = verify_bundle(bundle(), trust);
  ASSERT_FALSE(untrusted.has_value());
  EXPECT_EQ(bundle_refusal(untrusted.error()), "untrusted-key");
  EXPECT_NE(untrusted.error().message.find(other->id()), std::string::npos)
      << untrusted.error().message;
  auto nobody = verify_bundle(bundle(), BundleTrust{});
  ASSERT_FALSE(nobody.has_value());
  EXPECT_EQ(bundle_refusal(nobody.error()), "untrusted-key");
  // Trusting the other key as well accepts it.
  trust.keys.push_back(*other);
  EXPECT_TRUE(verify_bundle(bundle(), trust).has_value());
}

TEST_F(Bundles, AnEntryThatDoesNotMatchItsKeyIsRefusedEvenWhenCorrectlySigned) {
  std::string bytes = read_file(bundle());
  // The ptx entry's passport says kind "ptx"; its key record says so too.
  const std::size_t at = bytes.find("\"kind\":\"ptx\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 12, "\"kind\":\"pty\"");
  write_file(bundle(), bytes);
  test::resign(bundle(), key());
  auto verified = verify_bundle(bundle(), trust);
  ASSERT_FALSE(verified.has_value());
  EXPECT_EQ(bundle_refusal(verified.error()), "entry-mismatch") << verified.error().message;
  auto target = cache("c");
  EXPECT_FALSE(install_bundle(bundle(), trust, *target).has_value());
  EXPECT_TRUE(target->list()->empty());
}

TEST_F(Bundles, APayloadChangedAndResignedStillFailsItsPassport) {
  std::string bytes = read_file(bundle());
  const char* r = bytes.data() + bundle::k_header_size + bundle::k_record_size;
  const std::uint64_t off = bundle::load_u64(r + bundle::k_record_payload_offset);
  bytes[off] = 'X';
  write_file(bundle(), bytes);
  test::resign(bundle(), key());
  auto verified = verify_bundle(bundle(), trust);
  ASSERT_FALSE(verified.has_value());
  EXPECT_EQ(bundle_refusal(verified.error()), "payload-mismatch");
}

TEST_F(Bundles, KeyFilesArePemThatOpensslReads) {
  struct stat st {};
  ASSERT_EQ(::stat(key().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  const std::string pub = read_file(key().string() + ".pub");
  EXPECT_EQ(pub.rfind("-----BEGIN PUBLIC KEY-----\n", 0), 0U) << pub;
  // OpenSSL derives the same public key from the private key file.
  const std::string derived = (dir() / "derived.pub").string();
  const std::string cmd =
      "openssl pkey -in '" + key().string() + "' -pubout -out '" + derived + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << "openssl (Debian openssl, scripts/bootstrap.sh) could not read the key";
  EXPECT_EQ(read_file(derived), pub);
  auto read_back = read_bundle_public_key(derived);
  ASSERT_TRUE(read_back.has_value());
  EXPECT_EQ(read_back->id(), trust.keys[0].id());
  // A key made by OpenSSL signs bundles kcache trusts.
  const auto openssl_key = dir() / "openssl.key";
  ASSERT_EQ(std::system(("openssl genpkey -algorithm ed25519 -out '" + openssl_key.string() +
                         "' 2>/dev/null && "
                         "chmod 600 '" +
                         openssl_key.string() + "' && openssl pkey -in '" + openssl_key.string() +
                         "' -pubout -out '" + openssl_key.string() + ".pub' 2>/dev/null")
                            .c_str()),
            0);
  ASSERT_TRUE(create_bundle(bundle(), artifacts, BundleCreateOptions{openssl_key}).has_value());
  auto theirs = read_bundle_public_key(openssl_key.string() + ".pub");
  ASSERT_TRUE(theirs.has_value());
  EXPECT_TRUE(verify_bundle(bundle(), BundleTrust{{*theirs}}).has_value());
}

TEST_F(Bundles, KeygenNeverReplacesAFileAndAReadableKeyIsRefused) {
  auto again = generate_bundle_keys(key(), dir() / "new.pub");
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("already exists"), std::string::npos);
  ASSERT_EQ(::chmod(key().c_str(), 0644), 0);
  auto refused = create_bundle(dir() / "x.kcb", artifacts, BundleCreateOptions{key()});
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("chmod 600"), std::string::npos)
      << refused.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir() / "x.kcb"));
}

TEST_F(Bundles, AnArtifactThatDoesNotVerifyIsNeverWritten) {
  std::vector<Artifact> bad = artifacts;
  bad[0].payload = Payload(std::string("changed"));
  auto made = create_bundle(dir() / "bad.kcb", bad, BundleCreateOptions{key()});
  ASSERT_FALSE(made.has_value());
  EXPECT_EQ(made.error().code, ErrorCode::corrupt);
  EXPECT_FALSE(std::filesystem::exists(dir() / "bad.kcb"));
}

TEST_F(Bundles, AnEmptyBundleIsValid) {
  ASSERT_TRUE(create_bundle(bundle(), {}, BundleCreateOptions{key()}).has_value());
  EXPECT_EQ(read_file(bundle()).size(), bundle::k_header_size + bundle::k_trailer_size);
  auto info = verify_bundle(bundle(), trust);
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->entries.empty());
}

} // namespace
} // namespace kcache
