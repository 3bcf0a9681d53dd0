#include "kcache/engine_name.hpp"

#include <gtest/gtest.h>

namespace kcache {
namespace {

TEST(EngineName, BuildsTheIssueExample) {
  const EngineName n{"dinov2_vpr", "87", version_tag("6.2"), version_tag("10.3"), "fp16", extension_for_kind("engine")};
  auto file = n.build();
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_EQ(*file, "dinov2_vpr_sm87_jp62_trt103_fp16.engine");
}

TEST(EngineName, RoundTripsEveryValidName) {
  const std::vector<EngineName> names{
      {"dinov2_vpr", "87", "62", "103", "fp16", "engine"},
      {"resnet50", "90a", "na", "na", "int8", "engine"},
      {"kernels_v2-fast", "120", "na", "na", "fp32", "cubin"},
      {"A-b_C", "na", "na", "na", "bf16", "fatbin"},
      {"sm", "87", "na", "na", "fp16", "onnx"},       // "sm" alone is no tag
      {"smooth_jpeg_trtx", "87", "na", "na", "fp16", "bin"},
  };
  for (const auto& n : names) {
    auto file = n.build();
    ASSERT_TRUE(file) << n.model << ": " << file.error().message;
    auto back = EngineName::parse(*file);
    ASSERT_TRUE(back) << *file << ": " << back.error().message;
    EXPECT_EQ(*back, n) << *file;
  }
}

TEST(EngineName, RejectsModelNamesThatWouldNotRoundTrip) {
  for (const char* model : {"net_sm87", "a_jp62_b", "x_trt103", "x_jpna", "_lead", "trail_", "dou__ble", "has.dot",
                            "sl/ash", "sp ace", "", "x_sm90a"}) {
    const EngineName n{model, "87", "62", "103", "fp16", "engine"};
    auto file = n.build();
    EXPECT_FALSE(file) << model;
    if (!file) {
      EXPECT_EQ(file.error().code, ErrorCode::invalid_argument);
    }
  }
  EXPECT_FALSE(validate_model_name(std::string(129, 'a')));
  EXPECT_TRUE(validate_model_name(std::string(128, 'a')));
}

TEST(EngineName, ParseRejectsNamesOutsideTheSchema) {
  for (const char* file : {"model.engine", "m_sm87_jp62_fp16.engine", "m_sm87_jp62_trt103_fp16", "m_sm8.7_jp62_trt103_fp16.engine",
                           "m_smx_jp62_trt103_fp16.engine", "m_sm87_jp6.2_trt103_fp16.engine", "m_sm87_jp62_trt103_FP16.engine",
                           "_sm87_jp62_trt103_fp16.engine", "a_sm87_sm87_jp62_trt103_fp16.engine"}) {
    EXPECT_FALSE(EngineName::parse(file)) << file;
  }
}

TEST(EngineName, VersionTagsDropDotsAndKeepMajorMinor) {
  EXPECT_EQ(version_tag("6.2"), "62");
  EXPECT_EQ(version_tag("10.3.0.26"), "103");
  EXPECT_EQ(version_tag("13"), "13");
  EXPECT_EQ(version_tag(""), "na");
  EXPECT_EQ(version_tag("na"), "na");
  EXPECT_EQ(version_tag("6.2-rc"), "na");
}

TEST(EngineName, DifferentHostsGiveDifferentNames) {
  const EngineName a{"m", "87", "62", "103", "fp16", "engine"};
  EngineName b = a;
  b.sm = "90";
  EngineName c = a;
  c.trt = "100";
  EngineName d = a;
  d.jp = "na";
  EXPECT_NE(*a.build(), *b.build());
  EXPECT_NE(*a.build(), *c.build());
  EXPECT_NE(*a.build(), *d.build());
}

TEST(EngineName, KindsMapToExtensions) {
  EXPECT_EQ(extension_for_kind("engine"), "engine");
  EXPECT_EQ(extension_for_kind("cubin"), "cubin");
  EXPECT_EQ(extension_for_kind("blob"), "bin");
}

}  // namespace
}  // namespace kcache
