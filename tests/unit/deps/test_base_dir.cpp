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

// Every way the names can be formed counts (issue 39): a line splice inside
// the identifier, a piece of a name next to a `##`, a toolkit macro.
TEST(BaseDir, LocationNamesFormedThroughSplicesPastesAndToolkitMacrosCount) {
  EXPECT_EQ(location_token("#define WHERE __FI\\\nLE__\n"), "__FILE__");
  EXPECT_EQ(location_token("#define WHERE __FI?\?/\nLE__\n"), "__FILE__");
  EXPECT_EQ(location_token("auto l = __builtin_source_location();"), "__builtin_source_location");
  EXPECT_TRUE(location_fragment("__FI"));
  EXPECT_TRUE(location_fragment("LE__"));
  EXPECT_TRUE(location_fragment("ass"));
  EXPECT_FALSE(location_fragment("__FILE__"));  // whole: location_token() has it
  EXPECT_FALSE(location_fragment("x"));
  EXPECT_FALSE(location_fragment("kernel"));
  CompileRequest r;
  r.name = "/b/k.cu";
  r.source = "#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\nint n = sizeof(CAT(__FI, LE__));\n";
  EXPECT_NE(files_name_their_location(r, {}, "/b").find("pastes tokens (##)"), std::string::npos);
  // The paste and the piece in different files count together.
  r.source = "#define CAT(a, b) a##b\n";
  r.headers = {{"h.h", "header", "int n = sizeof(CAT(__FI, LE__));\n"}};
  EXPECT_NE(files_name_their_location(r, {}, "/b").find("in-memory header h.h holds __FI"), std::string::npos);
  r.headers.clear();
  r.source = "#define CAT(a, b) a##b\nint kernel_value;\n";
  EXPECT_EQ(files_name_their_location(r, {}, "/b"), "");
  const std::set<std::string, std::less<>> toolkit{"_CCCL_BUILTIN_FILE"};
  r.source = "auto f = _CCCL_BUILTIN_FILE();\n";
  EXPECT_EQ(files_name_their_location(r, {}, "/b", &toolkit),
            "k.cu uses _CCCL_BUILTIN_FILE, which the toolkit defines to name the file");
  EXPECT_EQ(files_name_their_location(r, {}, "/b"), "");
}

// base_dir above the checkouts: paths under it keyed relative to the working
// directory when that is under it too.
TEST(BaseDir, PathsAreKeyedRelativeToTheWorkingDirectoryUnderTheBase) {
  EXPECT_EQ(keyed_path("/home/a/proj/k.cu", "/home", "/home/a/proj"), "k.cu");
  EXPECT_EQ(keyed_path("/home/a/proj/inc/h.h", "/home", "/home/a/proj/build"), "../inc/h.h");
  EXPECT_EQ(keyed_path("/home/a/proj", "/home", "/home/a/proj"), ".");
  EXPECT_EQ(keyed_path("/usr/include/x.h", "/home", "/home/a/proj"), "/usr/include/x.h");
  EXPECT_EQ(keyed_path("rel/k.cu", "/home", "/home/a/proj"), "rel/k.cu");
  EXPECT_EQ(keyed_path("/home/a/proj/k.cu", "/home", ""), "a/proj/k.cu");
  EXPECT_EQ(keyed_path("/home/a/proj/k.cu", "", "/home/a/proj"), "/home/a/proj/k.cu");
  test::TempDir tmp;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(tmp.path());
  const std::string here = std::filesystem::current_path().string();
  EXPECT_EQ(base_dir_anchor(here), here);
  EXPECT_EQ(base_dir_anchor(std::filesystem::path(here).parent_path().string()), here);
  EXPECT_EQ(base_dir_anchor(here + "/below"), "");
  std::filesystem::current_path(cwd);
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
  const auto file = tmp.path() / "aa" / ("base-dir-2-" + key);
  EXPECT_EQ(test::read_file(file.string()), "absolute: src/k.cu uses __FILE__\n");
  const std::string other(64, 'b');
  const auto other_file = tmp.path() / "bb" / ("base-dir-2-" + other);
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
