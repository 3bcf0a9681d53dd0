#include "kcache/compile_options.hpp"

#include <gtest/gtest.h>

namespace kcache {
namespace {

std::vector<std::string> canon(std::vector<std::string> in) {
  auto r = canonicalize_nvrtc_options(in);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
  return r ? r->options : std::vector<std::string>{};
}

TEST(CompileOptions, ArchSpellingsGiveOneCanonicalForm) {
  const std::vector<std::string> want{"--gpu-architecture=sm_90"};
  EXPECT_EQ(canon({"-arch=sm_90"}), want);
  EXPECT_EQ(canon({"-arch", "sm_90"}), want);
  EXPECT_EQ(canon({"--gpu-architecture", "sm_90"}), want);
  EXPECT_EQ(canon({"--gpu-architecture=sm_90"}), want);
  EXPECT_EQ(canon({"-arch sm_90"}), want);
  EXPECT_NE(canon({"-arch=sm_90a"}), want);
  auto r = canonicalize_nvrtc_options({"-arch", "sm_90"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->arch, "sm_90");
}

TEST(CompileOptions, DefineAndIncludeSpellingsGiveOneForm) {
  const std::vector<std::string> want{"--define-macro=X=1"};
  EXPECT_EQ(canon({"-DX=1"}), want);
  EXPECT_EQ(canon({"-D", "X=1"}), want);
  EXPECT_EQ(canon({"-D=X=1"}), want);
  EXPECT_EQ(canon({"--define-macro=X=1"}), want);
  EXPECT_EQ(canon({"-I/a"}), (std::vector<std::string>{"--include-path=/a"}));
  EXPECT_EQ(canon({"-I", "/a"}), (std::vector<std::string>{"--include-path=/a"}));
  EXPECT_EQ(canon({"-dc"}), canon({"-rdc=true"}));
  EXPECT_EQ(canon({"-G"}), canon({"--device-debug"}));
}

TEST(CompileOptions, OrderIsKeptWhereItMattersAndFreeElsewhere) {
  // -D/-U order matters: "-DX -UX" differs from "-UX -DX".
  EXPECT_NE(canon({"-DX", "-UX"}), canon({"-UX", "-DX"}));
  EXPECT_NE(canon({"-I/a", "-I/b"}), canon({"-I/b", "-I/a"}));
  // Independent options do not depend on order.
  EXPECT_EQ(canon({"-arch=sm_90", "-lineinfo", "-DX"}), canon({"-DX", "-lineinfo", "--gpu-architecture=sm_90"}));
}

TEST(CompileOptions, SideEffectOptionsAreRefused) {
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--create-pch=x.pch"},
                                                                {"-pch"},
                                                                {"--pch-dir=/tmp"},
                                                                {"--use-pch=x.pch"},
                                                                {"-time=t.csv"},
                                                                {"--time", "t.csv"},
                                                                {"--fdevice-time-trace=t.json"}}) {
    auto r = canonicalize_nvrtc_options(bad);
    ASSERT_FALSE(r) << bad[0];
    EXPECT_EQ(r.error().code, ErrorCode::unsupported) << bad[0];
    EXPECT_NE(r.error().message.find(bad[0]), std::string::npos) << r.error().message;
  }
}

TEST(CompileOptions, MissingValueIsInvalidArgument) {
  auto r = canonicalize_nvrtc_options({"-arch"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
}

TEST(CompileOptions, UnknownOptionsAreKeptVerbatimInOrder) {
  EXPECT_EQ(canon({"-Wfoo", "-arch=sm_90", "-Wbar"}),
            (std::vector<std::string>{"--gpu-architecture=sm_90", "-Wfoo", "-Wbar"}));
}

TEST(CompileOptions, LinkerAndNvvmArchSpellings) {
  auto a = canonicalize_nvjitlink_options({"-arch", "sm_90", "-lto"});
  auto b = canonicalize_nvjitlink_options({"-arch=sm_90", "-lto"});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->options, b->options);
  EXPECT_EQ(a->arch, "sm_90");
  auto c = canonicalize_nvvm_options({"-arch", "compute_90", "-opt=3"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->options, (std::vector<std::string>{"-arch=compute_90", "-opt=3"}));
}

}  // namespace
}  // namespace kcache
