#include "deps/header_scanner.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(std::string_view text, std::string* computed = nullptr) {
  return test::directive_names(text, computed);
}

TEST(HeaderScanner, FindsEveryIncludeForm) {
  const auto got = names(
      "#include \"a.h\"\n"
      "  #  include <b/c.h>\n"
      "#include_next <d.h>\n"
      "#import \"e.h\"\n"
      "#if __has_include(\"f.h\")\n#endif\n"
      "/* comment */ #include \"g.h\"\n"
      "#in\\\nclude \"h.h\"\n"
      "// #include \"not.h\"\n"
      "/* #include \"also_not.h\" */\n"
      "const char* s = \"#include \\\"str.h\\\"\";\n");
  EXPECT_EQ(got, (std::vector<std::string>{"a.h", "b/c.h", "d.h", "e.h", "f.h", "g.h", "h.h"}));
}

TEST(HeaderScanner, ComputedIncludeIsReported) {
  std::string computed;
  names("#define H \"x.h\"\n#include H\n", &computed);
  EXPECT_NE(computed.find("line 2"), std::string::npos) << computed;
  computed.clear();
  names("#if __has_include(H)\n#endif\n", &computed);
  EXPECT_FALSE(computed.empty());
}

TEST(HeaderScanner, FollowsNestedHeadersAndHashesContent) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc + "/sub");
  test::write_file(inc + "/a.h", "#include \"sub/b.h\"\n");
  test::write_file(inc + "/sub/b.h", "#include \"c.h\"\n#define B 1\n");
  test::write_file(inc + "/sub/c.h", "#define C 1\n");
  ScanInput in;
  const std::string src = "#include <a.h>\n#include \"missing.h\"\n";
  in.source = src;
  in.program_name = (tmp.path() / "k.cu").string();
  in.include_dirs = {inc};
  auto r = scan_headers(in);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->headers.size(), 3u);
  EXPECT_EQ(r->headers[0].path, inc + "/a.h");
  EXPECT_EQ(r->headers[1].path, inc + "/sub/b.h");
  EXPECT_EQ(r->headers[2].path, inc + "/sub/c.h");
  const auto old_digest = r->headers[2].sha256;
  test::write_file(inc + "/sub/c.h", "#define C 2\n");
  auto again = scan_headers(in);
  ASSERT_TRUE(again);
  EXPECT_NE(again->headers[2].sha256, old_digest);
}

TEST(HeaderScanner, EveryExistingCandidateIsTakenAndToolkitIsSkipped) {
  test::TempDir tmp;
  const auto a = (tmp.path() / "a").string();
  const auto b = (tmp.path() / "b").string();
  const auto tk = (tmp.path() / "toolkit").string();
  fs::create_directories(a);
  fs::create_directories(b);
  fs::create_directories(tk + "/include");
  test::write_file(a + "/h.h", "1");
  test::write_file(b + "/h.h", "2");
  test::write_file(tk + "/include/t.h", "#include \"h.h\"\n");
  ScanInput in;
  const std::string src = "#include <h.h>\n#include <t.h>\n";
  in.source = src;
  in.program_name = "k.cu";
  in.include_dirs = {a, b, tk + "/include"};
  in.toolkit_root = fs::weakly_canonical(tk);
  auto r = scan_headers(in);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->headers.size(), 2u);
  EXPECT_EQ(r->headers[0].path, a + "/h.h");
  EXPECT_EQ(r->headers[1].path, b + "/h.h");
}

TEST(HeaderScanner, InMemoryHeadersWinAndAreScanned) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  test::write_file(inc + "/mem.h", "on disk, shadowed");
  test::write_file(inc + "/x.h", "from disk");
  std::vector<NamedBytes> mem{{"mem.h", "header", "#include <x.h>\n"}};
  ScanInput in;
  const std::string src = "#include \"mem.h\"\n";
  in.source = src;
  in.program_name = "k.cu";
  in.include_dirs = {inc};
  in.memory_headers = &mem;
  auto r = scan_headers(in);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->headers.size(), 1u);
  EXPECT_EQ(r->headers[0].path, inc + "/x.h");
}

}  // namespace
}  // namespace kcache::jit
