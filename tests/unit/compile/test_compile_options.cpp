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
  EXPECT_EQ(canon({" -arch=sm_90\t"}), want);  // NVRTC ignores whitespace around an argument
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

// Spellings NVRTC 13.0 refuses ("unrecognized option", measured) are never
// rewritten into one it accepts: they stay verbatim, and NVRTC refuses them
// when compiling (tests/unit/compile/test_option_spellings.cpp compiles each).
TEST(CompileOptions, SpellingsNvrtcRefusesAreKeptVerbatim) {
  for (const std::string bad : {"-w -G", "-Gx", "-wx", "-dopt on", "-Xptxas -g", "-arch sm_90", "-lineinfo x",
                                "--define-macro X=1", "--include-path /a", "-include /a/h.h", "-maxrregcount 32",
                                "-dcx", "--G", "-device-debug"}) {
    EXPECT_EQ(canon({bad}), (std::vector<std::string>{bad})) << bad;
  }
  // -std, -frandom-seed and -opt-info take no separate value in NVRTC.
  EXPECT_EQ(canon({"-std", "c++17"}), (std::vector<std::string>{"-std", "c++17"}));
  EXPECT_EQ(canon({"-w", "-G"}), (std::vector<std::string>{"--device-debug", "--disable-warnings"}));
  // The one-letter -D, -U and -I take an attached value, after a space too.
  EXPECT_EQ(canon({"-D X=1"}), (std::vector<std::string>{"--define-macro=X=1"}));
  EXPECT_EQ(canon({"-I /a"}), (std::vector<std::string>{"--include-path=/a"}));
  auto flag_value = canonicalize_nvrtc_options({"-G=1"});
  ASSERT_FALSE(flag_value);
  EXPECT_NE(flag_value.error().message.find("-G=1"), std::string::npos);
}

TEST(CompileOptions, LinkerAndNvvmOptionsAreKeptAsGiven) {
  auto a = canonicalize_nvjitlink_options({"-arch=sm_90", "-lto"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->options, (std::vector<std::string>{"-arch=sm_90", "-lto"}));
  EXPECT_EQ(a->arch, "sm_90");
  auto c = canonicalize_nvvm_options({"-arch=compute_90", "-opt=3"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->options, (std::vector<std::string>{"-arch=compute_90", "-opt=3"}));
  EXPECT_EQ(c->arch, "compute_90");
}

// nvJitLink and libNVVM 13.0 refuse a value after a space or as the next
// argument (measured): refused here, naming the option, not rewritten.
TEST(CompileOptions, LinkerAndNvvmSpellingsTheyRefuseAreRefused) {
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"-arch", "sm_90"}, {"-arch sm_90"}, {"-arch=sm_90", "-maxrregcount 32"}, {"-arch=sm_90", "-Xptxas", "-v"}}) {
    auto r = canonicalize_nvjitlink_options(bad);
    ASSERT_FALSE(r) << bad.back();
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(r.error().message.find("nvJitLink"), std::string::npos) << r.error().message;
  }
  for (const auto& bad : std::vector<std::vector<std::string>>{{"-arch", "compute_90"}, {"-arch compute_90"},
                                                               {"-arch=compute_90", "-opt 3"}}) {
    auto r = canonicalize_nvvm_options(bad);
    ASSERT_FALSE(r) << bad.back();
    EXPECT_NE(r.error().message.find("libNVVM"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("option '-"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace kcache
