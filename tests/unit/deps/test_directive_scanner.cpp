#include "deps/directive_scanner.hpp"
#include "deps/header_scanner.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

#include <filesystem>
#include <gtest/gtest.h>

// Each test here hides a real #include behind a construct the scanner must
// lex the way the compiler does; a scanner that gets it wrong misses the
// include (usually by taking the code after it for a comment).
namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(std::string_view text, std::string* computed = nullptr) {
  return test::directive_names(text, computed);
}

using Names = std::vector<std::string>;

TEST(DirectiveScanner, CommentBeforeHashOnTheSameLine) {
  EXPECT_EQ(names("/* x */ #include \"a.h\"\n"
                  "/* one\n two */ #include \"b.h\"\n"
                  "  /**/  /* y */\t# include <c.h>\n"),
            (Names{"a.h", "b.h", "c.h"}));
}

TEST(DirectiveScanner, BlanksAroundTheHash) {
  EXPECT_EQ(names("  #  include \"a.h\"\n\t#\tinclude <b.h>\n\f#include_next <c.h>\n"),
            (Names{"a.h", "b.h", "c.h"}));
}

TEST(DirectiveScanner, ContinuationsInsideTheDirective) {
  EXPECT_EQ(names("#\\\ninclude \"a.h\"\n"
                  "#inc\\\nlude \"b.h\"\n"
                  "#include \\\n  \"c.h\"\n"
                  "#\\\r\ninclude \"d.h\"\r\n"
                  "#include \"e\\\n.h\"\n"),
            (Names{"a.h", "b.h", "c.h", "d.h", "e.h"}));
}

TEST(DirectiveScanner, DigraphHash) {
  EXPECT_EQ(names("%:include \"a.h\"\n  %:  include <b.h>\n%\\\n:include \"c.h\"\n"),
            (Names{"a.h", "b.h", "c.h"}));
}

TEST(DirectiveScanner, CommentsInsideTheDirective) {
  EXPECT_EQ(names("#include /* c */ \"a.h\" // trailing\n"
                  "# /* c */ include <b.h>\n"
                  "#include /* one\n two */ \"c.h\"\n"
                  "#include \"d.h\" /* one\n two */\n"
                  "#include \"e.h\"\n"),
            (Names{"a.h", "b.h", "c.h", "d.h", "e.h"}));
}

TEST(DirectiveScanner, HeaderNamesMayHoldCommentMarkers) {
  std::string computed;
  EXPECT_EQ(names("#include <x/*y.h>\n"
                  "#include \"a.h\"\n"
                  "#include <p//q.h>\n"
                  "int z; // */\n",
                  &computed),
            (Names{"x/*y.h", "a.h", "p//q.h"}));
  EXPECT_TRUE(computed.empty()) << computed;
}

TEST(DirectiveScanner, RawStringHidesQuotesAndCommentMarkers) {
  EXPECT_EQ(names("const char* s = R\"( \" /* )\";\n"
                  "#include \"a.h\"\n"
                  "const char* t = R\"xy( )\" /* )xy\";\n"
                  "#include \"b.h\"\n"
                  "auto u = u8R\"(')\", v = LR\"(\")\";\n"
                  "#include \"c.h\"\n"
                  "// */\n"),
            (Names{"a.h", "b.h", "c.h"}));
}

TEST(DirectiveScanner, RawStringSpansLinesAndHidesDirectives) {
  EXPECT_EQ(
      names("const char* s = R\"(\n#include \"inside.h\"\n\" /* )\";\n#include \"a.h\"\n// */\n"),
      (Names{"a.h"}));
}

TEST(DirectiveScanner, IdentifierEndingInRIsNoRawPrefix) {
  // `xR"(` is the identifier xR and an ordinary string; taking it for a raw
  // string would skip to the `)"` two lines down.
  EXPECT_EQ(
      names("int xR = 0; const char* s = xR\"(\";\n#include \"a.h\"\nconst char* t = \")\";\n"),
      (Names{"a.h"}));
}

TEST(DirectiveScanner, UnterminatedRawStringIsAnOrdinaryString) {
  EXPECT_EQ(names("const char* s = R\"(abc\n#include \"a.h\"\n"), (Names{"a.h"}));
}

TEST(DirectiveScanner, CharacterLiteralsHoldingQuotes) {
  EXPECT_EQ(names("char a = '\"', b = '\\'', c = '\\\\'; const char* s = \"/*\";\n"
                  "#include \"a.h\"\n"
                  "const char* e = \"*/\";\n"),
            (Names{"a.h"}));
}

TEST(DirectiveScanner, DigitSeparatorsAreNoCharacterLiterals) {
  EXPECT_EQ(names("int k = 1'024; const char* s = \"'/*\";\n"
                  "#include \"a.h\"\n"
                  "double d = 0x1'0p-1'0 + .5'5 + 1e+1'0; const char* t = \"'/*\";\n"
                  "#include \"b.h\"\n"
                  "const char* e = \"*/\";\n"),
            (Names{"a.h", "b.h"}));
}

TEST(DirectiveScanner, EncodingPrefixedCharacterLiterals) {
  // u8'x' is a character literal, not a digit separator after the 8.
  EXPECT_EQ(names("auto a = u8'x', b = \"'/*\", c = L'\"';\n#include \"a.h\"\n// */\n"),
            (Names{"a.h"}));
}

TEST(DirectiveScanner, StringContinuedOverCrLf) {
  EXPECT_EQ(names("const char* s = \"abc\\\r\n/*\";\r\n#include \"a.h\"\r\n// */\r\n"),
            (Names{"a.h"}));
}

TEST(DirectiveScanner, EscapedQuoteInString) {
  EXPECT_EQ(names("const char* s = \"a\\\"/*\";\n#include \"a.h\"\n// */\n"), (Names{"a.h"}));
}

TEST(DirectiveScanner, BlockCommentEndSplitByContinuation) {
  EXPECT_EQ(names("/* c *\\\n/\n#include \"a.h\"\n/* */\n"), (Names{"a.h"}));
}

TEST(DirectiveScanner, CommentOpenerSplitByContinuation) {
  // Missing the split `/*` would take R"( for a raw string running to line 3.
  EXPECT_EQ(names("int x; /\\\n* R\"( */\n#include \"a.h\"\nconst char* t = \")\";\n"),
            (Names{"a.h"}));
}

TEST(DirectiveScanner, LineCommentContinuationSwallowsOnlyTheNextLine) {
  EXPECT_EQ(names("// c \\\n#include \"not.h\"\n#include \"a.h\"\n"), (Names{"a.h"}));
}

TEST(DirectiveScanner, IncludeInsideIfZeroIsTaken) {
  EXPECT_EQ(names("#if 0\n#include \"dead.h\"\n#else\n#include \"live.h\"\n#endif\n"),
            (Names{"dead.h", "live.h"}));
}

TEST(DirectiveScanner, HasIncludeInConditionsAndMacros) {
  EXPECT_EQ(names("#if 0\n#elif __has_include(<a.h>) && \\\n  __has_include ( \"b.h\" )\n#endif\n"
                  "#define HAVE_C __has_include_next(<c.h>)\n"),
            (Names{"a.h", "b.h", "c.h"}));
}

TEST(DirectiveScanner, HashInTheMiddleOfALineIsNoDirective) {
  EXPECT_EQ(names("#define S(x) #x\nconst char* s = S(include); x = y # include \"no.h\"\n"),
            Names{});
}

TEST(DirectiveScanner, ComputedIncludeReportsThePhysicalLine) {
  std::string computed;
  names("// one\n/* two\n three */\n#include HEADER\n", &computed);
  EXPECT_EQ(computed, "line 4: #include without a literal file name");
}

TEST(DirectiveScanner, EmptyAndDirectiveOnlyTexts) {
  EXPECT_EQ(names(""), Names{});
  EXPECT_EQ(names("#"), Names{});
  EXPECT_EQ(names("#include \"a.h\""), (Names{"a.h"}));
  EXPECT_EQ(names("/* never closed\n#include \"x.h\"\n"), Names{});
}

// The same through scan_headers: a header on disk that hides its include
// behind a raw string and a comment still brings the nested header in.
TEST(DirectiveScanner, TrickyHeaderOnDiskBringsItsInclude) {
  test::TempDir tmp;
  const auto inc = (tmp.path() / "inc").string();
  fs::create_directories(inc);
  test::write_file(inc + "/outer.h",
                   "const char* s = R\"( \" /* )\";\n/* c */ #include \"inner.h\"\n// */\n");
  test::write_file(inc + "/inner.h", "#define INNER 1\n");
  ScanInput in;
  const std::string src = "/**/ %:include <outer.h>\n";
  in.source = src;
  in.program_name = (tmp.path() / "k.cu").string();
  in.include_dirs = {inc};
  auto r = scan_headers(in);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(r->not_cacheable.empty()) << r->not_cacheable;
  ASSERT_EQ(r->headers.size(), 2u);
  EXPECT_EQ(r->headers[0].path, inc + "/inner.h");
  EXPECT_EQ(r->headers[1].path, inc + "/outer.h");
}

} // namespace
} // namespace kcache::jit
