#include "kcache/host_fingerprint.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "support/temp_dir.hpp"

namespace kcache {
namespace {

TEST(HostFingerprint, ParsesTheHostFlag) {
  auto h = HostFingerprint::parse("sm=87,jp=6.2,trt=10.3");
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->sm, "87");
  EXPECT_EQ(h->jetpack, "6.2");
  EXPECT_EQ(h->trt, "10.3");
  EXPECT_EQ(h->driver, "na");
  EXPECT_EQ(h->cuda, "na");
  EXPECT_EQ(h->to_string(), "sm=87,driver=na,cuda=na,trt=10.3,jp=6.2");
}

TEST(HostFingerprint, AcceptsDottedSmAndArchSuffix) {
  EXPECT_EQ(HostFingerprint::parse("sm=8.7")->sm, "87");
  EXPECT_EQ(HostFingerprint::parse("sm=90a")->sm, "90a");
  EXPECT_EQ(HostFingerprint::parse("sm=na,cuda=13.0")->cuda, "13.0");
}

TEST(HostFingerprint, CanonicalTextRoundTrips) {
  auto h = HostFingerprint::parse("sm=90a,driver=580.65,cuda=13.0,trt=10.3.0,jp=na");
  ASSERT_TRUE(h);
  auto again = HostFingerprint::parse(h->to_string());
  ASSERT_TRUE(again);
  EXPECT_EQ(*h, *again);
}

TEST(HostFingerprint, RejectsBadPairsWithTheFix) {
  for (const char* spec : {"", "sm", "sm=", "gpu=87", "sm=87;jp=6.2", "sm=../x", "jp=6.2,", "trt=ten"}) {
    auto h = HostFingerprint::parse(spec);
    ASSERT_FALSE(h) << spec;
    EXPECT_EQ(h.error().code, ErrorCode::invalid_argument);
    EXPECT_NE(h.error().message.find("sm"), std::string::npos) << h.error().message;
  }
}

TEST(HostFingerprint, MapsTegraReleasesToJetPack) {
  EXPECT_EQ(jetpack_from_tegra_release("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64"), "6.2");
  EXPECT_EQ(jetpack_from_tegra_release("# R36 (release), REVISION: 4.0, GCID: 1"), "6.1");
  EXPECT_EQ(jetpack_from_tegra_release("# R35 (release), REVISION: 4.1, GCID: 1"), "5.1.2");
  EXPECT_EQ(jetpack_from_tegra_release("# R32 (release), REVISION: 7.4, GCID: 1"), "4.6.1");
  EXPECT_EQ(jetpack_from_tegra_release("garbage"), "na");
  EXPECT_EQ(jetpack_from_tegra_release("# R99 (release), REVISION: 1.0"), "na");
}

TEST(HostFingerprint, ProbeReadsTheTegraFileAndNeverFails) {
  test::TempDir dir;
  const auto release = dir.path() / "nv_tegra_release";
  std::ofstream(release) << "# R36 (release), REVISION: 4.3, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x\n";
  HostProbeOptions options;
  options.tegra_release = release;
  options.cuda_home = dir.path() / "no-cuda-here";
  const HostFingerprint h = probe_host(options);
  EXPECT_EQ(h.jetpack, "6.2");
  // Every probed value is either absent or a well-formed value the --host syntax accepts.
  auto again = HostFingerprint::parse(h.to_string());
  ASSERT_TRUE(again) << h.to_string();
  EXPECT_EQ(*again, h);
}

TEST(HostFingerprint, ProbeFindsTheToolkitVersionWhereNvrtcIsInstalled) {
  const auto home = resolve_cuda_home();
  std::error_code ec;
  if (!std::filesystem::exists(home / "lib64" / "libnvrtc.so", ec) && !std::filesystem::exists(home / "version.json", ec)) {
    GTEST_SKIP() << "no CUDA toolkit under " << home;
  }
  const HostFingerprint h = probe_host();
  EXPECT_NE(h.cuda, "na");
  EXPECT_NE(h.cuda.find('.'), std::string::npos) << h.cuda;
}

}  // namespace
}  // namespace kcache
