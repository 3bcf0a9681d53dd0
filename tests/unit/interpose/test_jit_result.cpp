// The record an interposed compile is stored as (src/interpose/jit_result.hpp):
// every code and byte comes back exactly, and anything but one well-formed
// record is refused.
#include "interpose/jit_result.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kcache::interpose {
namespace {

JitResult sample() {
  JitResult r;
  r.compile_rc = 0;
  r.outputs[0] = {0, 0, std::string("ptx\0text", 8)};
  r.outputs[1] = {0, 0, std::string(3000, '\x7f')};
  r.outputs[2] = {0, 0, ""};
  r.outputs[3] = {5, 5, ""};
  r.log = {0, 0, std::string("warning\0", 8)};
  r.names = {{"fill<1>", 0, "_Z4fillILi1EEvPi"}, {"bad<", 10, ""}};
  return r;
}

TEST(JitResult, RoundTripsEveryCodeAndByte) {
  const JitResult r = sample();
  const auto back = decode_jit_result(encode(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
  ASSERT_NE(back->lowered("fill<1>"), nullptr);
  EXPECT_EQ(back->lowered("fill<1>")->lowered, "_Z4fillILi1EEvPi");
  EXPECT_EQ(back->lowered("fill<2>"), nullptr);
}

TEST(JitResult, RefusesEveryTruncationTrailingBytesAndAnotherMagic) {
  const std::string bytes = encode(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_jit_result(bytes.substr(0, n)).has_value()) << n;
  }
  EXPECT_FALSE(decode_jit_result(bytes + "x").has_value());
  std::string other = bytes;
  other[0] = 'X';
  EXPECT_FALSE(decode_jit_result(other).has_value());
}

TEST(JitResult, RefusesAHugeNameCountWithoutAllocatingIt) {
  std::string bytes = encode(JitResult{});
  bytes.replace(bytes.size() - 4, 4, std::string("\xff\xff\xff\x7f", 4));
  EXPECT_FALSE(decode_jit_result(bytes).has_value());
}

TEST(JitResult, ReplayGivesTheRecordedCodeSizeAndBytes) {
  const JitOutput o{0, 0, "abc"};
  std::size_t size = 0;
  EXPECT_EQ(replay_size(o, &size), 0);
  EXPECT_EQ(size, 3U);
  char out[4] = {};
  EXPECT_EQ(replay_get(o, out), 0);
  EXPECT_EQ(std::string(out, 3), "abc");
  const JitOutput failed{6, 6, ""};
  size = 99;
  EXPECT_EQ(replay_size(failed, &size), 6);
  EXPECT_EQ(size, 99U);  // untouched on a failed call
}

}  // namespace
}  // namespace kcache::interpose
