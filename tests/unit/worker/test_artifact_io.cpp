// The artifact stream format (docs/artifact-format.md): round trips lose
// nothing; truncation, garbage and lies are `corrupt` (TESTING F09 style).
#include "kcache/artifact_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "support/temp_dir.hpp"
#include "util/fd.hpp"
#include "util/wire_codec.hpp"

using kcache::Artifact;
using kcache::ErrorCode;
using kcache::KeyBuilder;

namespace {

Artifact sample(std::size_t payload_size = 300, unsigned seed = 1) {
  std::string payload(payload_size, '\0');
  std::mt19937 rng(seed);
  for (auto& c : payload) {
    c = static_cast<char>(rng());
  }
  auto kb = KeyBuilder("nvrtc").add("arch", "sm_90").add_content("source", "kernel " + std::to_string(seed));
  Artifact a = Artifact::make(kb, "cubin", payload, {"nvrtc", "13.0"}, {"sm_90", "host-x"});
  a.passport.log = "warning: something\nwith two lines and a \x01 byte";
  a.passport.compile_duration_us = 123456;
  a.passport.symbols = {{"add<int>", "_Z3addIiEvPT_"}, {"scale", "_Z5scalePf"}};
  a.passport.labels = {{"team", "x"}};
  return a;
}

}  // namespace

TEST(ArtifactIo, RoundTripKeepsPayloadAndWholePassport) {
  const Artifact a = sample();
  auto back = kcache::decode_artifact(kcache::encode_artifact(a));
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(*back, a);
  EXPECT_EQ(back->passport.symbols.at("add<int>"), "_Z3addIiEvPT_");
  EXPECT_EQ(back->passport.compile_duration_us, 123456U);
  EXPECT_EQ(back->passport.log, a.passport.log);
}

TEST(ArtifactIo, EmptyPayloadRoundTrips) {
  const Artifact a = sample(0);
  auto back = kcache::decode_artifact(kcache::encode_artifact(a));
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(*back, a);
}

TEST(ArtifactIo, TwoArtifactsBackToBackThroughAPipeFromAnotherProcess) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const Artifact a = sample(200000, 7);  // larger than a pipe buffer
  const Artifact b = sample(10, 8);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    const bool ok = kcache::write_artifact(fds[1], a).has_value() &&
                    kcache::write_artifact(fds[1], b).has_value();
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[1]);
  auto ra = kcache::read_artifact(fds[0]);
  auto rb = kcache::read_artifact(fds[0]);
  auto rc = kcache::read_artifact(fds[0]);  // end of stream
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(ra.has_value()) << ra.error().describe();
  ASSERT_TRUE(rb.has_value()) << rb.error().describe();
  EXPECT_EQ(*ra, a);
  EXPECT_EQ(*rb, b);
  ASSERT_FALSE(rc.has_value());
  EXPECT_EQ(rc.error().code, ErrorCode::corrupt);
}

TEST(ArtifactIo, EveryTruncationIsCorruptInMemoryAndOnAStream) {
  const std::string bytes = kcache::encode_artifact(sample(64));
  kcache::test::TempDir dir;
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    auto r = kcache::decode_artifact(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(r.has_value()) << len;
    ASSERT_EQ(r.error().code, ErrorCode::corrupt) << len;
  }
  // On a stream, a sample of cut points (every byte would be slow through files).
  for (std::size_t len = 0; len < bytes.size(); len += 7) {
    const auto path = dir.path() / "cut";
    {
      kcache::util::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
      ASSERT_TRUE(kcache::wire::write_all(fd.get(), std::string_view(bytes).substr(0, len)));
    }
    auto r = kcache::read_artifact_file(path);
    ASSERT_FALSE(r.has_value()) << len;
    ASSERT_EQ(r.error().code, ErrorCode::corrupt) << len;
  }
}

TEST(ArtifactIo, EveryFlippedByteIsRejected) {
  const std::string bytes = kcache::encode_artifact(sample(48));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    auto r = kcache::decode_artifact(bad);
    ASSERT_FALSE(r.has_value()) << "byte " << i;
    ASSERT_EQ(r.error().code, ErrorCode::corrupt) << i;
  }
}

TEST(ArtifactIo, TrailingBytesAreRejected) {
  std::string bytes = kcache::encode_artifact(sample(8));
  bytes.push_back('x');
  auto r = kcache::decode_artifact(bytes);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("after the trailer"), std::string::npos) << r.error().message;
}

TEST(ArtifactIo, WrongMagicVersionAndLengthsSayWhy) {
  const std::string good = kcache::encode_artifact(sample(8));
  auto with = [&](std::size_t at, std::string_view patch) {
    std::string b = good;
    b.replace(at, patch.size(), patch);
    return kcache::decode_artifact(b);
  };
  auto magic = with(0, "XCART");
  ASSERT_FALSE(magic.has_value());
  EXPECT_NE(magic.error().message.find("magic"), std::string::npos);
  auto version = with(8, std::string("\x02\0\0\0", 4));
  ASSERT_FALSE(version.has_value());
  EXPECT_NE(version.error().message.find("version 2"), std::string::npos);
  auto zero_passport = with(12, std::string("\0\0\0\0", 4));
  ASSERT_FALSE(zero_passport.has_value());
  EXPECT_NE(zero_passport.error().message.find("passport length"), std::string::npos);
  auto huge_payload = with(16, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  ASSERT_FALSE(huge_payload.has_value());
  EXPECT_NE(huge_payload.error().message.find("exceeds the cap"), std::string::npos);
}

// A header that promises 4 GiB - 1 and then ends must fail fast, having
// allocated no more than one read chunk.
TEST(ArtifactIo, LyingPayloadLengthOnAStreamIsTruncatedNotAllocated) {
  kcache::wire::Writer w;
  w.raw(std::string_view("KCART\r\n\x1a", 8));
  w.u32(1);
  w.u32(2);
  w.u64((std::uint64_t{4} << 30) - 1);
  w.raw("{}");
  w.raw("only a few bytes");
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_TRUE(kcache::wire::write_all(fds[1], w.out()));
  ::close(fds[1]);
  auto r = kcache::read_artifact(fds[0]);
  ::close(fds[0]);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::corrupt);
  EXPECT_NE(r.error().message.find("truncated payload"), std::string::npos) << r.error().message;
}

TEST(ArtifactIo, RandomGarbageNeverParses) {
  std::mt19937 rng(42);
  const std::string good = kcache::encode_artifact(sample(32));
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string b;
    if (trial % 2 == 0) {
      b.resize(rng() % 200);
      for (auto& c : b) {
        c = static_cast<char>(rng());
      }
      if (trial % 4 == 0 && b.size() >= 8) {
        b.replace(0, 8, std::string_view("KCART\r\n\x1a", 8));  // get past the magic
      }
    } else {
      b = good;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
        b[rng() % b.size()] = static_cast<char>(rng());
      }
      if (b == good) {
        continue;
      }
    }
    accepted += kcache::decode_artifact(b).has_value() ? 1 : 0;
  }
  EXPECT_EQ(accepted, 0);
}

// A passport that does not match the payload is refused even when the frame
// checksum is right (the writer was given an inconsistent artifact).
TEST(ArtifactIo, PayloadThatDoesNotMatchItsPassportIsCorrupt) {
  Artifact a = sample(16);
  std::string bytes(a.payload);
  bytes[3] = static_cast<char>(bytes[3] ^ 1);
  a.payload = std::move(bytes);
  auto r = kcache::decode_artifact(kcache::encode_artifact(a));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::corrupt);
  EXPECT_NE(r.error().message.find("SHA-256"), std::string::npos) << r.error().message;
}

TEST(ArtifactIo, FileRoundTripIsAtomicAndPrivate) {
  kcache::test::TempDir dir;
  const auto path = dir.path() / "a.kcart";
  const Artifact a = sample(5000);
  ASSERT_TRUE(kcache::write_artifact_file(path, a));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  auto back = kcache::read_artifact_file(path);
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(*back, a);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary left behind
}

TEST(ArtifactIo, FileReaderRefusesSymlinksFifosAndMissingFiles) {
  kcache::test::TempDir dir;
  const auto real = dir.path() / "real";
  ASSERT_TRUE(kcache::write_artifact_file(real, sample(4)));
  const auto link = dir.path() / "link";
  std::filesystem::create_symlink(real, link);
  auto via_link = kcache::read_artifact_file(link);
  ASSERT_FALSE(via_link.has_value());
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto via_fifo = kcache::read_artifact_file(fifo);  // must not block
  ASSERT_FALSE(via_fifo.has_value());
  EXPECT_EQ(via_fifo.error().code, ErrorCode::corrupt);
  auto missing = kcache::read_artifact_file(dir.path() / "none");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
}
