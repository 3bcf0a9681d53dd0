// The loader's checks, without a GPU: arch names, real NVRTC cubins and PTX,
// the compatibility table, and the order of checks.
#include "kcache/arch_compat.hpp"

#include <gtest/gtest.h>

#include "kcache/cache.hpp"
#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"

using kcache::Artifact;
using kcache::ArchName;
using kcache::DeviceInfo;
using kcache::ErrorCode;

namespace {

DeviceInfo device(int major, int minor, int driver = 13000) { return DeviceInfo{0, major, minor, driver, "test"}; }

Artifact compiled(const std::string& target, const std::string& arch, const std::string& kernel = "k") {
  static kcache::test::TempDir memo;
  kcache::Toolkit::instance().set_memo_dir(memo.path());
  auto out = kcache::compile_in_process(kcache::test::kernel_request(kernel, 1, target, arch));
  EXPECT_TRUE(out.has_value()) << out.error().describe();
  return out ? out->artifact : Artifact{};
}

}  // namespace

TEST(ArchCompat, ParsesArchNamesStrictly) {
  EXPECT_EQ(*kcache::parse_arch("sm_90a"), (ArchName{90, 'a', false}));
  EXPECT_EQ(*kcache::parse_arch("sm_100f"), (ArchName{100, 'f', false}));
  EXPECT_EQ(*kcache::parse_arch("compute_75"), (ArchName{75, 0, true}));
  EXPECT_EQ(kcache::parse_arch("sm_120")->text(), "sm_120");
  for (const char* bad : {"", "sm_", "sm_9", "sm_9000", "sm_90b", "gfx90a", "sm_90 ", "compute_x5", "SM_90"}) {
    EXPECT_FALSE(kcache::parse_arch(bad).has_value()) << bad;
  }
}

TEST(ArchCompat, RealCubinHeadersGiveTheirSmAndSuffix) {
  KCACHE_REQUIRE_NVRTC();
  for (const auto& [arch, sm, suffix] : {std::tuple{"sm_75", 75U, '\0'}, std::tuple{"sm_90", 90U, '\0'},
                                          std::tuple{"sm_90a", 90U, 'a'}, std::tuple{"sm_120", 120U, '\0'}}) {
    const Artifact a = compiled("cubin", arch);
    auto info = kcache::inspect_cubin(a.payload);
    ASSERT_TRUE(info.has_value()) << arch << ": " << info.error().describe();
    EXPECT_EQ(info->sm, sm) << arch;
    if (info->has_tool_note) {
      EXPECT_EQ(info->suffix, suffix) << arch;
    }
  }
}

TEST(ArchCompat, DamagedCubinsAreCorrupt) {
  KCACHE_REQUIRE_NVRTC();
  const std::string good(compiled("cubin", "sm_80").payload);
  auto patched = [&](std::size_t at, std::string_view bytes) {
    std::string b = good;
    b.replace(at, bytes.size(), bytes);
    return kcache::inspect_cubin(b);
  };
  EXPECT_FALSE(kcache::inspect_cubin("").has_value());
  EXPECT_FALSE(kcache::inspect_cubin(good.substr(0, 63)).has_value());
  EXPECT_FALSE(patched(0, "\x7f" "ELG").has_value());
  EXPECT_FALSE(patched(4, "\x01").has_value());                 // ELF32
  EXPECT_FALSE(patched(18, std::string("\x3e\x00", 2)).has_value());  // x86-64, not CUDA
  EXPECT_FALSE(patched(0x28, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8)).has_value());  // e_shoff out of file
  auto e = patched(18, std::string("\x3e\x00", 2));
  EXPECT_EQ(e.error().code, ErrorCode::corrupt);
  EXPECT_NE(e.error().message.find("190"), std::string::npos);
}

TEST(ArchCompat, RealPtxDirectivesAreRead) {
  KCACHE_REQUIRE_NVRTC();
  auto info = kcache::inspect_ptx(compiled("ptx", "compute_80").payload);
  ASSERT_TRUE(info.has_value()) << info.error().describe();
  EXPECT_EQ(info->target.number, 80U);
  EXPECT_GE(info->isa_major, 8U);
  EXPECT_FALSE(kcache::inspect_ptx("// no directives\n.entry x {}\n").has_value());
  EXPECT_FALSE(kcache::inspect_ptx(".version 9.0\n.target gfx90a\n").has_value());
}

// The compatibility table, on passports and payloads built by NVRTC.
TEST(ArchCompat, CubinRunsOnlyOnExactlyItsSm) {
  KCACHE_REQUIRE_NVRTC();
  const Artifact sm80 = compiled("cubin", "sm_80");
  EXPECT_TRUE(kcache::check_loadable(sm80, device(8, 0)).has_value());
  // The driver would run sm_80 SASS on 8.6; kcache serves each SM its own binary.
  for (const auto& d : {device(8, 6), device(7, 5), device(9, 0), device(12, 0)}) {
    auto r = kcache::check_loadable(sm80, d);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::unsupported);
    EXPECT_NE(r.error().message.find("sm_80"), std::string::npos) << r.error().message;
  }
  const Artifact sm86 = compiled("cubin", "sm_86");
  EXPECT_FALSE(kcache::check_loadable(sm86, device(8, 0)).has_value());
}

TEST(ArchCompat, ArchSpecificCubinRunsOnExactlyItsDevice) {
  KCACHE_REQUIRE_NVRTC();
  const Artifact sm90a = compiled("cubin", "sm_90a");
  EXPECT_TRUE(kcache::check_loadable(sm90a, device(9, 0)).has_value());
  auto on_100 = kcache::check_loadable(sm90a, device(10, 0));
  ASSERT_FALSE(on_100.has_value());
  EXPECT_NE(on_100.error().message.find("sm_90a"), std::string::npos);
}

TEST(ArchCompat, PtxRunsOnNewerDevicesWhenTheDriverKnowsItsIsa) {
  KCACHE_REQUIRE_NVRTC();
  const Artifact ptx = compiled("ptx", "compute_75");
  EXPECT_TRUE(kcache::check_loadable(ptx, device(7, 5)).has_value());
  EXPECT_TRUE(kcache::check_loadable(ptx, device(9, 0)).has_value());
  EXPECT_TRUE(kcache::check_loadable(ptx, device(12, 0)).has_value());
  EXPECT_FALSE(kcache::check_loadable(ptx, device(7, 0)).has_value());
  // A CUDA 12.8 driver cannot JIT the PTX ISA that CUDA 13 writes.
  auto old_driver = kcache::check_loadable(ptx, device(9, 0, 12080));
  ASSERT_FALSE(old_driver.has_value());
  EXPECT_NE(old_driver.error().message.find("newer than the driver"), std::string::npos) << old_driver.error().message;
  EXPECT_EQ(kcache::max_ptx_isa(13000), (std::pair<unsigned, unsigned>{9, 0}));
  EXPECT_EQ(kcache::max_ptx_isa(12040), (std::pair<unsigned, unsigned>{8, 4}));
  EXPECT_EQ(kcache::max_ptx_isa(99000), (std::pair<unsigned, unsigned>{9, 0}));
}

// The digest is checked before anything else: a tampered payload is corrupt
// even on a device it could otherwise run on.
TEST(ArchCompat, TamperedPayloadIsCorruptBeforeAnyArchCheck) {
  KCACHE_REQUIRE_NVRTC();
  Artifact a = compiled("cubin", "sm_80");
  std::string bytes(a.payload);
  bytes[bytes.size() / 2] ^= 1;
  a.payload = std::move(bytes);
  auto r = kcache::check_loadable(a, device(8, 0));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::corrupt);
  EXPECT_NE(r.error().message.find("SHA-256"), std::string::npos);
}

TEST(ArchCompat, PassportThatDisagreesWithThePayloadIsCorrupt) {
  KCACHE_REQUIRE_NVRTC();
  Artifact a = compiled("cubin", "sm_80");
  a.passport.target.arch = "sm_90";  // a lie: the cubin is for sm_80
  auto r = kcache::check_loadable(a, device(9, 0));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::corrupt);
  Artifact p = compiled("ptx", "compute_75");
  p.passport.target.arch = "compute_90a";
  EXPECT_EQ(kcache::check_loadable(p, device(9, 0)).error().code, ErrorCode::corrupt);
}

TEST(ArchCompat, LtoIrAndOtherKindsAreNotLoadable) {
  KCACHE_REQUIRE_NVRTC();
  auto ltoir = kcache::compile_in_process(kcache::test::kernel_request("l", 1, "ltoir", "sm_90"));
  ASSERT_TRUE(ltoir.has_value()) << ltoir.error().describe();
  auto r = kcache::check_loadable(ltoir->artifact, device(9, 0));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::unsupported);
  EXPECT_NE(r.error().message.find("link it to a cubin"), std::string::npos);
  auto blob = Artifact::make(kcache::KeyBuilder("test").add("t", "1"), "engine", "bytes");
  EXPECT_EQ(kcache::check_loadable(blob, device(9, 0)).error().code, ErrorCode::unsupported);
}
