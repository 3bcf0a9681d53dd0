// Worker protocol frames (docs/worker-protocol.md): round trips, and every
// truncation and random garbage refused (TESTING F09 style).
#include "worker/worker_protocol.hpp"

#include <gtest/gtest.h>

#include <random>

#include "kcache/key_builder.hpp"

using kcache::CompileRequest;
using kcache::ErrorCode;
namespace w = kcache::worker;

namespace {

CompileRequest full_request() {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "a.cu";
  r.source = std::string("__global__ void k() {}\0with a NUL", 33);
  r.target_kind = "cubin";
  r.options = {"-arch=sm_90", "-DX=1", ""};
  r.headers = {{"h.cuh", "header", "#pragma once\n"}};
  r.name_expressions = {"k", "add<int>"};
  r.inputs = {{"lib.ltoir", "ltoir", std::string(100, '\x01')}};
  r.extra_digest = "salt";
  r.source_path = "/src/a.cu";
  return r;
}

}  // namespace

TEST(WorkerProtocol, CompileRequestRoundTripsEveryField) {
  const CompileRequest r = full_request();
  auto back = w::decode_compile(w::encode_compile(42, "/work/dir with space", r));
  ASSERT_TRUE(back.has_value()) << back.error().describe();
  EXPECT_EQ(back->id, 42U);
  EXPECT_EQ(back->working_dir, "/work/dir with space");
  EXPECT_EQ(back->request, r);
}

TEST(WorkerProtocol, ResultAndErrorRepliesRoundTrip) {
  auto art = kcache::Artifact::make(kcache::KeyBuilder("test").add("t", "1").add("x", "1"), "cubin", "bytes");
  art.passport.symbols = {{"add<int>", "_Z3addIiEvv"}};
  auto ok = w::decode_reply(w::FrameType::result, w::encode_result(7, {art, false}), 7);
  ASSERT_TRUE(ok.has_value()) << ok.error().describe();
  ASSERT_TRUE(ok->has_value());
  EXPECT_EQ((*ok)->artifact, art);
  EXPECT_FALSE((*ok)->cacheable);
  auto err = w::decode_reply(w::FrameType::error,
                             w::encode_error(8, kcache::Error{ErrorCode::compile_failed, "bad", "the log"}), 8);
  ASSERT_TRUE(err.has_value());
  ASSERT_FALSE(err->has_value());
  EXPECT_EQ(err->error().code, ErrorCode::compile_failed);
  EXPECT_EQ(err->error().log, "the log");
  // A reply to another request is garbage.
  EXPECT_FALSE(w::decode_reply(w::FrameType::result, w::encode_result(7, {art, true}), 9).has_value());
}

TEST(WorkerProtocol, EveryTruncationOfABodyIsRefused) {
  const std::string compile = w::encode_compile(1, "/tmp", full_request());
  for (std::size_t len = 0; len < compile.size(); ++len) {
    ASSERT_FALSE(w::decode_compile(compile.substr(0, len)).has_value()) << len;
  }
  auto art = kcache::Artifact::make(kcache::KeyBuilder("test").add("t", "1"), "blob", "payload");
  const std::string result = w::encode_result(1, {art, true});
  for (std::size_t len = 0; len < result.size(); ++len) {
    ASSERT_FALSE(w::decode_reply(w::FrameType::result, result.substr(0, len), 1).has_value()) << len;
  }
  EXPECT_FALSE(w::decode_compile(compile + "x").has_value());  // trailing bytes
}

TEST(WorkerProtocol, FrameHeadersAreCheckedStrictly) {
  const std::string good = w::encode_frame(w::FrameType::compile, "abc").substr(0, w::k_frame_header_bytes);
  ASSERT_TRUE(w::parse_frame_header(good).has_value());
  auto with = [&](std::size_t at, std::string_view b) {
    std::string h = good;
    h.replace(at, b.size(), b);
    return w::parse_frame_header(h);
  };
  EXPECT_NE(with(0, "XCWP").error().message.find("magic"), std::string::npos);
  const auto other_version = with(4, std::string("\x03\x00", 2));  // the current one is 2
  ASSERT_FALSE(other_version.has_value());
  EXPECT_NE(other_version.error().message.find("version 3"), std::string::npos);
  EXPECT_NE(with(6, std::string("\x09\x00", 2)).error().message.find("type 9"), std::string::npos);
  EXPECT_NE(with(8, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)).error().message.find("cap"),
            std::string::npos);
}

TEST(WorkerProtocol, RandomGarbageIsNeverAcceptedAndNeverCrashes) {
  std::mt19937 rng(7);
  const std::string good = w::encode_compile(3, "/tmp", full_request());
  int accepted = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string b;
    if (trial % 2 == 0) {
      b.resize(rng() % 300);
      for (auto& c : b) {
        c = static_cast<char>(rng());
      }
    } else {
      b = good;
      b[rng() % b.size()] = static_cast<char>(rng());
      b.resize(b.size() - rng() % 4);
      if (b == good) {
        continue;
      }
    }
    auto r = w::decode_compile(b);
    // A mutation may still decode (a changed byte inside a string); it must
    // then re-encode to exactly the bytes given (no lenient parsing).
    if (r.has_value()) {
      EXPECT_EQ(w::encode_compile(r->id, r->working_dir, r->request), b);
      ++accepted;
    }
    (void)w::decode_reply(w::FrameType::result, b, 3);
    (void)w::decode_reply(w::FrameType::error, b, 3);
    (void)w::decode_hello(b);
  }
  SUCCEED() << accepted << " mutated inputs were still well-formed requests";
}
