#include "deps/base_dir.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

TEST(BaseDir, PathsUnderTheBaseAreMadeRelativeOthersKept) {
  EXPECT_EQ(relative_to_base("/home/a/proj/src/k.cu", "/home/a/proj"), "src/k.cu");
  EXPECT_EQ(relative_to_base("/home/a/proj", "/home/a/proj"), ".");
  EXPECT_EQ(relative_to_base("/home/a/projX/k.cu", "/home/a/proj"), "/home/a/projX/k.cu");
  EXPECT_EQ(relative_to_base("/usr/local/cuda/include", "/home/a/proj"), "/usr/local/cuda/include");
  EXPECT_EQ(relative_to_base("src/k.cu", "/home/a/proj"), "src/k.cu");
  EXPECT_EQ(relative_to_base("/home/a/proj/k.cu", ""), "/home/a/proj/k.cu");
}

TEST(BaseDir, SettingMustBeAnAbsoluteDirectoryOtherThanRoot) {
  const char* before = std::getenv("KCACHE_BASE_DIR");
  const std::string saved = before != nullptr ? before : "";
  for (const auto& [value, expected] : std::vector<std::pair<std::string, std::string>>{
           {"/home/a/proj/", "/home/a/proj"}, {"/home/a/./proj//", "/home/a/proj"}, {"relative", ""}, {"/", ""},
           {"", ""}}) {
    ::setenv("KCACHE_BASE_DIR", value.c_str(), 1);
    EXPECT_EQ(base_dir_setting(), expected) << value;
  }
  ::unsetenv("KCACHE_BASE_DIR");
  EXPECT_EQ(base_dir_setting(), "");
  if (before != nullptr) {
    ::setenv("KCACHE_BASE_DIR", saved.c_str(), 1);
  }
}

TEST(BaseDir, LocationTokensAreWholeIdentifiers) {
  EXPECT_EQ(location_token("p = __FILE__;"), "__FILE__");
  EXPECT_EQ(location_token("assert(x);"), "assert");
  EXPECT_EQ(location_token("#include <cuda/std/source_location>"), "source_location");
  EXPECT_EQ(location_token("auto f = __builtin_FILE();"), "__builtin_FILE");
  EXPECT_EQ(location_token("static_assert(sizeof(int) == 4);"), "");
  EXPECT_EQ(location_token("my_assert_x(1); __FILE___X"), "");
  EXPECT_EQ(location_token("__FILE_NAME__ is only the basename"), "");
}

TEST(BaseDir, OutputCheckFindsRawAndPtxDecimalPaths) {
  EXPECT_TRUE(output_names_base(".file 1 \"/home/a/proj/k.cu\"", "/home/a/proj"));
  // "/ab/" as PTX writes a string constant.
  EXPECT_TRUE(output_names_base(".b8 $str[8] = {47, 97, 98, 47, 107, 46, 99, 0};", "/ab"));
  EXPECT_FALSE(output_names_base(".b8 $str[4] = {47, 97, 98, 0};", "/ab"));
  EXPECT_FALSE(output_names_base("/home/a/projX/k.cu", "/home/a/proj"));
  EXPECT_FALSE(output_names_base("anything", ""));
}

TEST(BaseDir, VerdictsAreRememberedOnDiskAndDamagedOnesIgnored) {
  test::TempDir tmp;
  const std::string key(64, 'a');
  EXPECT_FALSE(remembered_verdict(key, tmp.path()));
  remember_verdict(key, tmp.path(), "absolute: src/k.cu uses __FILE__");
  const auto file = tmp.path() / "aa" / ("base-dir-" + key);
  EXPECT_EQ(test::read_file(file.string()), "absolute: src/k.cu uses __FILE__\n");
  const std::string other(64, 'b');
  const auto other_file = tmp.path() / "bb" / ("base-dir-" + other);
  std::filesystem::create_directories(other_file.parent_path());
  for (const std::string damaged : {"relative", "maybe\n", "absolute: a\nb\n", ""}) {
    test::write_file(other_file.string(), damaged);
    EXPECT_FALSE(remembered_verdict(other, tmp.path())) << damaged;
  }
  test::write_file(other_file.string(), "relative\n");
  EXPECT_EQ(remembered_verdict(other, tmp.path()), "relative");
}

}  // namespace
}  // namespace kcache::jit
