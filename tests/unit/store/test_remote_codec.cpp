// The remote object codec and team keys: every object a reader accepts is
// exactly what a key holder wrote for that key; everything else is refused
// with its reason (TESTING R02).
#include "store/remote/remote_codec.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <fstream>

#include "kcache/artifact_io.hpp"
#include "kcache/key_builder.hpp"
#include "store/remote/team_key.hpp"
#include "support/payload.hpp"
#include "support/temp_dir.hpp"

namespace kr = kcache::remote;
using kcache::Artifact;
using kcache::Key;
using kcache::KeyBuilder;

namespace {

kr::TeamKey key_of(char fill) { return *kr::make_team_key(std::string(32, fill), "test"); }

Artifact sample(std::size_t size = 4096) {
  Artifact a = kcache::test::make_artifact(7, 11, size);
  a.passport.log = "ptxas info: 12 registers";
  a.passport.compile_duration_us = 1234;
  return a;
}

kr::CodecOptions signing(char fill) {
  kr::CodecOptions o;
  o.sign = key_of(fill);
  return o;
}

kr::Rejection reason_of(std::string_view object, const Key& key, const kr::CodecOptions& o) {
  auto d = kr::decode_object(object, key, o);
  EXPECT_FALSE(d.has_value());
  return d ? kr::Rejection::corrupt : d.error().reason;
}

}  // namespace

TEST(RemoteCodec, ObjectNameIsNamespacedAndVersioned) {
  const Key k = kcache::test::test_key(1);
  EXPECT_EQ(kr::object_name(k), "kcache:v1:" + k.hex());
}

TEST(RemoteCodec, RoundTripsCompressedUncompressedAndSigned) {
  const Artifact a = sample(64 * 1024);
  for (auto compression : {kr::Compression::none, kr::Compression::zstd}) {
    for (bool sign : {false, true}) {
      kr::CodecOptions o = sign ? signing('a') : kr::CodecOptions{};
      o.compression = compression;
      const std::string object = kr::encode_object(a, o);
      auto back = kr::decode_object(object, a.passport.key, o);
      ASSERT_TRUE(back.has_value()) << back.error().message;
      EXPECT_EQ(*back, a);
    }
  }
}

TEST(RemoteCodec, CompressesCompressiblePayloads) {
  Artifact a = Artifact::make(KeyBuilder("test").add("n", "z"), "blob", std::string(1 << 20, 'x'));
  kr::CodecOptions o;
  EXPECT_LT(kr::encode_object(a, o).size(), std::size_t{64} << 10);
  o.compression = kr::Compression::none;
  EXPECT_GT(kr::encode_object(a, o).size(), std::size_t{1} << 20);
}

TEST(RemoteCodec, UnsignedObjectIsRefusedWhenATeamKeyIsSet) {
  const Artifact a = sample();
  const std::string object = kr::encode_object(a, kr::CodecOptions{});
  EXPECT_EQ(reason_of(object, a.passport.key, signing('a')), kr::Rejection::unsigned_entry);
}

TEST(RemoteCodec, ObjectSignedWithAnotherKeyIsRefused) {
  const Artifact a = sample();
  const std::string object = kr::encode_object(a, signing('b'));
  EXPECT_EQ(reason_of(object, a.passport.key, signing('a')), kr::Rejection::unknown_signer);
}

TEST(RemoteCodec, ForgedSignerIdWithWrongMacIsRefused) {
  // An attacker copies a real signer id into an object it signs with its own key.
  const Artifact a = sample();
  std::string forged = kr::encode_object(a, signing('b'));
  const kr::TeamKey real = key_of('a');
  std::copy(real.id.begin(), real.id.end(), forged.begin() + 64);
  EXPECT_EQ(reason_of(forged, a.passport.key, signing('a')), kr::Rejection::bad_signature);
}

TEST(RemoteCodec, EveryFlippedByteOfASignedObjectIsRefused) {
  const Artifact a = sample(512);
  const kr::CodecOptions o = signing('a');
  const std::string object = kr::encode_object(a, o);
  for (std::size_t i = 0; i < object.size(); ++i) {
    std::string bad = object;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    auto d = kr::decode_object(bad, a.passport.key, o);
    ASSERT_FALSE(d.has_value()) << "flipped byte " << i << " was accepted";
  }
}

TEST(RemoteCodec, EveryFlippedByteOfAnUnsignedObjectIsRefused) {
  // Without a team key the payload SHA-256, the stream trailer and the key
  // recomputed from the key record still catch every change.
  const Artifact a = sample(512);
  kr::CodecOptions o;
  o.compression = kr::Compression::none;
  const std::string object = kr::encode_object(a, o);
  for (std::size_t i = 0; i < object.size(); ++i) {
    std::string bad = object;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    ASSERT_FALSE(kr::decode_object(bad, a.passport.key, o).has_value()) << "flipped byte " << i;
  }
}

TEST(RemoteCodec, ReplayUnderAnotherKeyIsRefusedEvenWhenSigned) {
  const Artifact a = sample();
  const kr::CodecOptions o = signing('a');
  const std::string object = kr::encode_object(a, o);
  EXPECT_EQ(reason_of(object, kcache::test::test_key(99), o), kr::Rejection::wrong_key);
}

TEST(RemoteCodec, SignedObjectWhoseKeyRecordDoesNotRecomputeIsRefused) {
  // A key holder (or a bug) writes an artifact whose passport claims a key its
  // key record does not produce: the identity check refuses it.
  Artifact a = sample();
  a.passport.key_record.fields.at(0).value += "-edited";
  const kr::CodecOptions o = signing('a');
  // The artifact stream's own check (Artifact::verify -> check_entry_identity)
  // refuses it first: counted as corrupt.
  EXPECT_EQ(reason_of(kr::encode_object(a, o), a.passport.key, o), kr::Rejection::corrupt);
  EXPECT_FALSE(kr::verify_object(a, a.passport.key).has_value());
  EXPECT_TRUE(kr::verify_object(sample(), sample().passport.key).has_value());
}

TEST(RemoteCodec, GarbageTruncatedAndOversizedObjectsAreRefused) {
  const Artifact a = sample(8192);
  kr::CodecOptions o;
  const std::string object = kr::encode_object(a, o);
  EXPECT_EQ(reason_of("", a.passport.key, o), kr::Rejection::malformed);
  EXPECT_EQ(reason_of(std::string(500, 'g'), a.passport.key, o), kr::Rejection::malformed);
  for (std::size_t cut : {std::size_t{10}, std::size_t{80}, object.size() / 2, object.size() - 1}) {
    EXPECT_EQ(reason_of(object.substr(0, cut), a.passport.key, o), kr::Rejection::malformed) << cut;
  }
  EXPECT_EQ(reason_of(object + "x", a.passport.key, o), kr::Rejection::malformed);
  kr::CodecOptions small = o;
  small.max_entry_size = object.size() - 1;
  EXPECT_EQ(reason_of(object, a.passport.key, small), kr::Rejection::too_large);
}

TEST(RemoteCodec, ZstdBombDeclaringAnotherSizeIsRefusedBeforeInflating) {
  const Artifact a = sample();
  kr::CodecOptions o;
  o.compression = kr::Compression::none;
  std::string object = kr::encode_object(a, o);
  // Replace the body with a zstd frame of 64 MiB of zeros, flag it compressed.
  const std::string zeros(std::size_t{64} << 20, '\0');
  std::string frame(ZSTD_compressBound(zeros.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), zeros.data(), zeros.size(), 1));
  std::string bomb = object.substr(0, 80);
  bomb[12] = 1;  // flags: zstd
  for (int i = 0; i < 8; ++i) {
    bomb[56 + i] = static_cast<char>((frame.size() >> (8 * i)) & 0xff);
  }
  bomb += frame;
  EXPECT_EQ(reason_of(bomb, a.passport.key, o), kr::Rejection::malformed);
}

// A small object whose header and zstd frame both claim a large stream (up
// to max_entry_size) but whose blocks stop early: refused, having cost what
// it inflated to, not the size it claims (the output grows as it is made).
TEST(RemoteCodec, ASmallObjectClaimingAHugeStreamCostsWhatItInflatesTo) {
  const Artifact a = sample();
  kr::CodecOptions o;
  o.compression = kr::Compression::none;
  const std::string object = kr::encode_object(a, o);
  const std::uint64_t claimed = std::uint64_t{128} << 20;
  std::string frame;
  {
    // Made here and freed before the child is forked (a child starts with its parent's resident pages).
    const std::string zeros(claimed, '\0');
    std::string out(ZSTD_compressBound(zeros.size()), '\0');
    out.resize(ZSTD_compress(out.data(), out.size(), zeros.data(), zeros.size(), 1));
    frame.assign(out);
  }
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), claimed);
  frame.resize(64);  // the frame header and a few 128 KiB blocks of the 1024 it claims
  std::string bomb = object.substr(0, 80);
  bomb[12] = 1;  // flags: zstd
  for (int i = 0; i < 8; ++i) {
    bomb[48 + i] = static_cast<char>((claimed >> (8 * i)) & 0xff);
    bomb[56 + i] = static_cast<char>((frame.size() >> (8 * i)) & 0xff);
  }
  bomb += frame;
  ASSERT_LE(claimed, o.max_entry_size);
  const pid_t child = ::fork();
  if (child == 0) {
    auto d = kr::decode_object(bomb, a.passport.key, o);
    ::_exit(!d && d.error().reason == kr::Rejection::malformed ? 0 : 1);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(child, &status, 0, &usage);
  ASSERT_TRUE(WIFEXITED(status)) << "the decoder crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "not refused as malformed";
  EXPECT_LT(usage.ru_maxrss, 48 * 1024) << "the decoder set aside the claimed " << (claimed >> 20) << " MiB";
}

TEST(RemoteCodec, RotationAcceptsOldAndNewKeysAndWritesWithTheNewOne) {
  const Artifact a = sample();
  const std::string by_old = kr::encode_object(a, signing('o'));
  kr::CodecOptions rotating = signing('n');
  rotating.read.push_back(key_of('o'));
  EXPECT_TRUE(kr::decode_object(by_old, a.passport.key, rotating).has_value());
  const std::string by_new = kr::encode_object(a, rotating);
  EXPECT_TRUE(kr::decode_object(by_new, a.passport.key, signing('n')).has_value());
  // After the rotation ends (old key dropped), old objects are refused.
  EXPECT_EQ(reason_of(by_old, a.passport.key, signing('n')), kr::Rejection::unknown_signer);
}

TEST(TeamKey, KeygenWritesA0600FileThatLoadsBackAndNeverReplacesOne) {
  kcache::test::TempDir dir;
  const auto path = dir.path() / "team.key";
  ::umask(022);
  auto made = kr::generate_team_key_file(path);
  ASSERT_TRUE(made.has_value()) << made.error().message;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_EQ(st.st_size, 65);
  auto loaded = kr::load_team_key(path);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->secret, made->secret);
  EXPECT_EQ(loaded->secret.size(), 32U);
  EXPECT_EQ(loaded->id, made->id);
  auto again = kr::generate_team_key_file(path);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("already exists"), std::string::npos);
  EXPECT_EQ(kr::load_team_key(path)->secret, made->secret);
  auto other = kr::generate_team_key_file(dir.path() / "other.key");
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->secret, made->secret);
}

TEST(TeamKey, ShortWorldReadableOrMissingKeyFilesAreRefusedByName) {
  kcache::test::TempDir dir;
  const auto short_key = dir.path() / "short.key";
  std::ofstream(short_key) << "0123456789abcdef";
  ::chmod(short_key.c_str(), 0600);
  auto r = kr::load_team_key(short_key);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(short_key.string()), std::string::npos);
  const auto open_key = dir.path() / "open.key";
  std::ofstream(open_key) << std::string(40, 'k');
  ::chmod(open_key.c_str(), 0644);
  r = kr::load_team_key(open_key);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("chmod 600"), std::string::npos);
  ::chmod(open_key.c_str(), 0600);
  r = kr::load_team_key(open_key);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->secret, std::string(40, 'k'));  // raw bytes, not hex
  EXPECT_FALSE(kr::load_team_key(dir.path() / "missing.key").has_value());
}
