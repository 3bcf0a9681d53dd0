#include "deps/macro_expander.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace kcache::jit {
namespace {

MacroTable table_of(std::string_view defines) {
  MacroTable t;
  for (const auto& d : scan_file(defines).defines) {
    t.add(d);
  }
  return t;
}

std::vector<std::string> names(std::string_view tokens, const MacroTable& t) {
  const auto e = expand_include(tokens, t);
  EXPECT_TRUE(e.error.empty()) << e.error;
  std::vector<std::string> out;
  for (const auto& n : e.names) {
    out.push_back((n.angled ? "<" : "\"") + n.name + (n.angled ? ">" : "\""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(MacroExpander, ThrustStyleIncludeTakesEveryDefinitionOfEveryBranch) {
  const auto t = table_of(
      "#if THRUST_HOST_SYSTEM == 1\n#  define __NS cpp\n#elif THRUST_HOST_SYSTEM == 2\n#  define __NS omp\n#endif\n"
      "#define __ROOT thrust/system/__NS\n"
      "#define __HEADER(filename) <__ROOT/detail/filename>\n");
  EXPECT_EQ(names("__HEADER(swap_ranges.h)", t),
            (std::vector<std::string>{"<__ROOT/detail/swap_ranges.h>", "<thrust/system/__NS/detail/swap_ranges.h>",
                                      "<thrust/system/cpp/detail/swap_ranges.h>",
                                      "<thrust/system/omp/detail/swap_ranges.h>"}));
}

TEST(MacroExpander, ObjectLikeHeaderNameAndStringizing) {
  const auto t = table_of(
      "#define ROOT lib/v2\n"
      "#define STR2(x) #x\n#define STR(x) STR2(x)\n"
      "#define QUOTED(f) STR(ROOT/f)\n"
      "#define H <ROOT/h.h>\n"
      "#define PASTE(a, b) a##b\n"
      "#define FROM_PASTE <PASTE(con, fig).h>\n");
  // Each macro may be undefined at the #include too: ROOT as written.
  EXPECT_EQ(names("H", t), (std::vector<std::string>{"<ROOT/h.h>", "<lib/v2/h.h>"}));
  EXPECT_EQ(names("QUOTED(x.h)", t), (std::vector<std::string>{"\"ROOT/x.h\"", "\"lib/v2/x.h\""}));
  EXPECT_EQ(names("FROM_PASTE", t), (std::vector<std::string>{"<PASTE(con, fig).h>", "<config.h>"}));
}

TEST(MacroExpander, CommandLineDefinitionsAndVariadics) {
  MacroTable t = table_of("#define PICK(...) <__VA_ARGS__>\n");
  t.add_command_line("BACKEND=cuda");
  t.add_command_line("WRAP(x)=<x/BACKEND.h>");
  EXPECT_EQ(names("WRAP(sys)", t), (std::vector<std::string>{"<sys/BACKEND.h>", "<sys/cuda.h>"}));
  EXPECT_EQ(names("PICK(a/b.h)", t), (std::vector<std::string>{"<a/b.h>"}));
}

TEST(MacroExpander, RecursionStopsAndUndefinedNamesStay) {
  const auto t = table_of("#define SELF SELF\n#define A <B/x.h>\n");
  EXPECT_TRUE(names("SELF", t).empty());  // expands to itself: no header name
  EXPECT_EQ(names("A", t), (std::vector<std::string>{"<B/x.h>"}));
}

// NVRTC reads vX.h where X is not defined at the #include (defined after
// it, #undef'd, -U, or in a branch not taken): X is also taken as written.
TEST(MacroExpander, EachMacroIsAlsoTakenAsUndefinedAtTheInclude) {
  const auto t = table_of(
      "#define STR(x) #x\n#define XSTR(x) STR(x)\n#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\n"
      "#define X 1\n");
  EXPECT_EQ(names("XSTR(CAT(v, X).h)", t),
            (std::vector<std::string>{"\"CAT(v, 1).h\"", "\"CAT(v, X).h\"", "\"CAT_(v, 1).h\"",
                                      "\"CAT_(v, X).h\"", "\"v1.h\"", "\"vX.h\""}));
  // Alternatives reached twice count once: 8 macros of one definition each
  // on a chain stay far below the bound.
  std::string defs;
  for (int m = 0; m < 8; ++m) {
    defs += "#define M" + std::to_string(m) + " M" + std::to_string(m + 1) + "\n";
  }
  defs += "#define M8 <m.h>\n";
  const auto chain = expand_include("M0", table_of(defs));
  EXPECT_TRUE(chain.error.empty()) << chain.error;
  ASSERT_EQ(chain.names.size(), 1u);
  EXPECT_EQ(chain.names[0].name, "m.h");
}

TEST(MacroExpander, TooManyAlternativesIsAnError) {
  std::string defs;
  for (int m = 0; m < 6; ++m) {
    for (int v = 0; v < 4; ++v) {
      defs += "#define M" + std::to_string(m) + " v" + std::to_string(v) + "\n";
    }
  }
  defs += "#define H <M0/M1/M2/M3/M4/M5.h>\n";
  const auto big = expand_include("H", table_of(defs));  // 4^6 combinations
  EXPECT_FALSE(big.error.empty());
}

TEST(DirectiveScanner, ScanFileKeepsComputedIncludesAndDefines) {
  const auto f = scan_file(
      "#define H(x) <x.h>\n"
      "#include H(a)\n"
      "#include \"lit.h\"\n"
      "#if __has_include(H(b))\n#endif\n"
      "#define HAS __has_include(<c.h>)\n");
  ASSERT_EQ(f.includes.size(), 4u);
  EXPECT_TRUE(f.includes[0].computed);
  EXPECT_EQ(f.includes[0].name, "H(a)");
  EXPECT_FALSE(f.includes[1].computed);
  EXPECT_TRUE(f.includes[2].computed);
  EXPECT_EQ(f.includes[2].name, "H(b)");
  EXPECT_EQ(f.includes[3].name, "c.h");
  ASSERT_EQ(f.defines.size(), 2u);
  EXPECT_EQ(f.defines[0].name, "H");
  EXPECT_TRUE(f.defines[0].function_like);
  EXPECT_EQ(f.defines[0].params, "x");
  EXPECT_EQ(f.defines[0].body, "<x.h>");
}

}  // namespace
}  // namespace kcache::jit
