#include "deps/source_text.hpp"

#include <gtest/gtest.h>

#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

TEST(SourceText, TrigraphsAreFoundAndTranslated) {
  EXPECT_TRUE(has_trigraph("?\?=include \"h.h\""));
  EXPECT_FALSE(has_trigraph("what?? no"));
  EXPECT_FALSE(has_trigraph("a ? b : c; ??"));
  EXPECT_EQ(translate_trigraphs("?\?=define A ?\?( ?\?) ?\?< ?\?> ?\?! ?\?' ?\?- ?\?/"), "#define A [ ] { } | ^ ~ \\");
  EXPECT_EQ(translate_trigraphs("??\?="), "?#");
}

TEST(SourceText, SplicesAreJoinedAfterTrigraphs) {
  EXPECT_EQ(joined_text("__FI\\\nLE__"), "__FILE__");
  EXPECT_EQ(joined_text("__FI\\  \t\nLE__"), "__FILE__");  // blanks before the newline, as GCC and EDG take it
  EXPECT_EQ(joined_text("__FI?\?/\nLE__"), "__FILE__");
  EXPECT_EQ(joined_text("a\\b\n"), "a\\b\n");
  EXPECT_EQ(joined_text("plain"), "plain");
}

// The scanner lists what either reading holds: NVRTC honours trigraphs with
// -std=c++03/11/14 and not by default.
TEST(SourceText, DirectiveScanTakesBothReadingsOfATrigraphFile) {
  const auto d = scan_file("?\?=include \"tri.h\"\n#include \"plain.h\"\n?\?=define V 1\n");
  std::vector<std::string> names;
  for (const auto& i : d.includes) {
    names.push_back(i.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"plain.h", "tri.h"}));
  ASSERT_EQ(d.defines.size(), 1u);
  EXPECT_EQ(d.defines[0].name, "V");
  EXPECT_EQ(test::directive_names("#inc?\?/\nlude <spliced.h>\n"), (std::vector<std::string>{"spliced.h"}));
}

}  // namespace
}  // namespace kcache::jit
