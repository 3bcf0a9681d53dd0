// Dependency files, manifests, memos and the absent names of a header list
// (src/nvcc/dependency_file.hpp, nvcc_manifest.hpp, header_state.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "nvcc/dependency_file.hpp"
#include "nvcc/header_state.hpp"
#include "nvcc/nvcc_manifest.hpp"
#include "nvcc/record_text.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache::nvcc {
namespace {

namespace fs = std::filesystem;

TEST(NvccDependencyFile, ReadsTheRuleNvccWrites) {
  const std::string text =
      "CMakeFiles/x.dir/k.cu.o : /p/src/k.cu \\\n"
      "    /usr/include/stdc-predef.h \\\n"
      "    /usr/local/cuda/bin/../targets/x86_64-linux/include/cuda_runtime.h \\\n"
      "    dev.h \\\n"
      "    /p/my\\ dir/h.h\n"
      "\n"
      "/usr/include/stdc-predef.h:\n";
  const auto d = parse_dependency_file(text);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->targets, std::vector<std::string>{"CMakeFiles/x.dir/k.cu.o"});
  const std::vector<std::string> want{"/p/src/k.cu", "/usr/include/stdc-predef.h",
                                      "/usr/local/cuda/bin/../targets/x86_64-linux/include/cuda_runtime.h", "dev.h",
                                      "/p/my dir/h.h"};
  EXPECT_EQ(d->prerequisites, want);
  EXPECT_FALSE(parse_dependency_file("no rule here\n"));
  EXPECT_FALSE(parse_dependency_file(""));
  EXPECT_EQ(parse_dependency_file("a.o: a.cu $$x.h")->prerequisites, (std::vector<std::string>{"a.cu", "$x.h"}));
}

TEST(NvccManifest, RoundTripsAndRefusesEveryDeviation) {
  DependencyManifest m;
  m.headers = {"/usr/include/stdio.h", "dev.h", "weird\nname.h"};
  m.absent = {{"/p/include", "vector"}, {"/p/include", "cuda"}, {".", "dev2.h"}};
  std::sort(m.absent.begin(), m.absent.end());
  m.has_depfile = true;
  m.depfile = "k.o : k.cu \\\n    dev.h\n";
  const std::string text = m.serialize();
  const auto back = DependencyManifest::parse(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->headers, m.headers);
  EXPECT_EQ(back->absent, m.absent);
  EXPECT_EQ(back->depfile, m.depfile);
  // Every truncation, and a flipped byte anywhere in the structure, is refused or parses to something else
  // only where the grammar allows it (the bytes of a string).
  for (std::size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(DependencyManifest::parse(text.substr(0, n))) << n;
  }
  EXPECT_FALSE(DependencyManifest::parse(text + "x"));
  EXPECT_FALSE(DependencyManifest::parse("kcache-nvcc-deps 2\nend\n"));
  // Absent names out of order are refused (the writer sorts them).
  DependencyManifest unsorted = m;
  std::swap(unsorted.absent[0], unsorted.absent[1]);
  EXPECT_FALSE(DependencyManifest::parse(unsorted.serialize()));
}

TEST(NvccManifest, AMemoIsRefusedWhenAnyByteChanged) {
  LocalMemo memo;
  memo.input_key = std::string(64, 'a');
  memo.manifest_key = std::string(64, 'b');
  memo.object_key = std::string(64, 'c');
  memo.headers = {{"h.h", "h.h", std::string(64, 'd'), FileStamp{1, 2, 3, 4, 5}}, {"gone.h", "gone.h", "missing", FileStamp{}}};
  memo.dirs = {{"/p/include", FileStamp{6, 7, 8, 9, 10}}};
  memo.has_depfile = true;
  memo.depfile = "x";
  memo.present = 3;
  const std::string text = memo.serialize();
  const auto back = LocalMemo::parse(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->object_key, memo.object_key);
  EXPECT_EQ(back->present, 3u);
  EXPECT_EQ(back->headers.size(), 2u);
  EXPECT_EQ(back->headers[0].stamp, memo.headers[0].stamp);
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::string flipped = text;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x01);
    EXPECT_FALSE(LocalMemo::parse(flipped)) << "byte " << i;
  }
}

TEST(NvccManifest, AMemoAppliesOnlyWhileEveryIdentityIsUnchanged) {
  test::TempDir dir;
  const auto h = (dir.path() / "h.h").string();
  test::write_file(h, "int x;\n");
  const auto stamp = stamp_of(h);
  ASSERT_TRUE(stamp);
  LocalMemo memo;
  memo.headers = {{h, h, std::string(64, 'd'), *stamp}};
  memo.dirs = {{dir.path().string(), *stamp_of(dir.path().string())}};
  EXPECT_TRUE(memo.still_applies());
  test::write_file(dir.path() / "new.h", "");  // the directory changed
  EXPECT_FALSE(memo.still_applies());
  memo.dirs = {{dir.path().string(), *stamp_of(dir.path().string())}};
  EXPECT_TRUE(memo.still_applies());
  test::write_file(h, "int y;\n");
  EXPECT_FALSE(memo.still_applies());
  memo.headers = {{h, h, std::string(64, 'd'), FileStamp{}}};  // a zero (racy) identity is never trusted
  EXPECT_FALSE(memo.still_applies());
}

TEST(NvccManifest, AChangedOrUntrustedDirectoryIsNamedForItsNamesToBeChecked) {
  test::TempDir dir;
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  const auto h = (dir.path() / "h.h").string();
  test::write_file(h, "int x;\n");
  const std::string a = (dir.path() / "a").string();
  const std::string b = (dir.path() / "b").string();
  LocalMemo memo;
  memo.headers = {{h, h, std::string(64, 'd'), *stamp_of(h)}};
  memo.dirs = {{a, *stamp_of(a)}, {b, FileStamp{}}};  // b's identity was racy when the memo was made
  auto changed = memo.changed_dirs();
  ASSERT_TRUE(changed);
  EXPECT_EQ(*changed, std::vector<std::string>{b});
  EXPECT_FALSE(memo.still_applies());
  test::write_file(dir.path() / "a" / "vector", "");  // a shadow appears in a
  changed = memo.changed_dirs();
  ASSERT_TRUE(changed);
  EXPECT_EQ(*changed, (std::vector<std::string>{a, b}));
  EXPECT_FALSE(still_missing(a, "vector"));
  EXPECT_TRUE(still_missing(a, "list"));
  fs::remove_all(b);  // a directory gone: the memo does not apply
  EXPECT_FALSE(memo.changed_dirs());
  fs::create_directories(b);
  test::write_file(h, "int y;\n");  // a header changed: the memo does not apply
  EXPECT_FALSE(memo.changed_dirs());
}

class NvccAbsentNames : public ::testing::Test {
 protected:
  void SetUp() override {
    m_old = fs::current_path();
    fs::current_path(m_dir.path());
    fs::create_directories("proj/src");
    fs::create_directories("proj/include/project");
    fs::create_directories("sys/bits");
    test::write_file("proj/src/k.cu", "#include <vector>\n#include \"project/util.h\"\n");
    test::write_file("proj/include/project/util.h", "#if __has_include(<optional_thing.h>)\n#endif\n");
    test::write_file("sys/vector", "#include <bits/stl.h>\n");
    test::write_file("sys/bits/stl.h", "");
  }
  void TearDown() override { fs::current_path(m_old); }

  // What the compile of proj/src/k.cu with -I proj/include and the system directory sys read.
  std::vector<AbsentName> names() {
    return absent_names({"sys/vector", "sys/bits/stl.h", "proj/include/project/util.h"}, "proj/src/k.cu",
                        {"proj/include", "sys"});
  }

  static bool holds(const std::vector<AbsentName>& names, const std::string& dir, const std::string& name) {
    return std::find(names.begin(), names.end(), AbsentName{dir, name}) != names.end();
  }

  test::TempDir m_dir;
  fs::path m_old;
};

TEST_F(NvccAbsentNames, NameEveryPathThatWouldShadowAHeader) {
  const auto n = names();
  // A system header dropped into the -I directory would be found first.
  EXPECT_TRUE(holds(n, "proj/include", "vector"));
  EXPECT_TRUE(holds(n, "proj/include", "bits"));
  // A quoted include is looked for beside its includer first, then along the search path.
  EXPECT_TRUE(holds(n, "proj/src", "project"));
  EXPECT_TRUE(holds(n, "sys", "project"));
  // An angled one is not looked for beside its includer.
  EXPECT_FALSE(holds(n, "proj/src", "vector"));
  // A __has_include of a file that exists nowhere: every place it was looked for.
  EXPECT_TRUE(holds(n, "proj/include", "optional_thing.h"));
  EXPECT_TRUE(holds(n, "sys", "optional_thing.h"));
  // What exists is never recorded as absent.
  EXPECT_FALSE(holds(n, "sys", "vector"));
  EXPECT_FALSE(holds(n, "proj/include", "project"));
  EXPECT_TRUE(std::is_sorted(n.begin(), n.end()));
}

TEST_F(NvccAbsentNames, AComputedIncludeLooksForEveryNameOfTheList) {
  test::write_file("proj/src/k.cu", "#define H <vector>\n#include H\n#include \"project/util.h\"\n");
  const auto n = names();
  // The macro's expansion is not known: every name a header of the list has is looked for
  // beside the source and along the search path.
  EXPECT_TRUE(holds(n, "proj/src", "vector"));
  EXPECT_TRUE(holds(n, "proj/src", "bits"));
  EXPECT_TRUE(holds(n, "proj/include", "vector"));
}

TEST_F(NvccAbsentNames, TheStateChangesWhenAShadowAppearsAndWhenAHeaderChanges) {
  const std::vector<std::string> headers{"sys/vector", "sys/bits/stl.h", "proj/include/project/util.h"};
  const auto n = names();
  const auto before = header_state(headers, n);
  EXPECT_EQ(before.present, 0u);
  EXPECT_EQ(header_state(headers, n).digest, before.digest);
  test::write_file("proj/include/vector", "// shadow\n");
  const auto shadowed = header_state(headers, n);
  EXPECT_EQ(shadowed.present, 1u);
  EXPECT_NE(shadowed.digest, before.digest);
  EXPECT_NE(shadowed.present_names.find("proj/include/vector"), std::string::npos);
  fs::remove("proj/include/vector");
  EXPECT_EQ(header_state(headers, n).digest, before.digest);
  test::write_file("sys/bits/stl.h", "changed");
  EXPECT_NE(header_state(headers, n).digest, before.digest);
  fs::remove("sys/bits/stl.h");
  const auto gone = header_state(headers, n);
  EXPECT_EQ(gone.headers[1].sha256, "missing");
}

TEST_F(NvccAbsentNames, AMissingSearchDirectoryIsRecordedInItsParent) {
  const auto n = absent_names({"sys/vector"}, "proj/src/k.cu", {"proj/nothing/here", "sys"});
  EXPECT_TRUE(holds(n, "proj", "nothing"));
}

TEST_F(NvccAbsentNames, KnownDigestsSpareReadingUnchangedHeaders) {
  const std::vector<std::string> headers{"sys/vector"};
  const auto fresh = header_state(headers, {});
  KnownDigests known;
  known["sys/vector"] = {fresh.headers[0].stamp, std::string(64, 'e')};
  // With the stamp unchanged the remembered digest is taken (the file is not read).
  EXPECT_EQ(header_state(headers, {}, &known).headers[0].sha256, std::string(64, 'e'));
  test::write_file("sys/vector", "new bytes");
  const auto changed = header_state(headers, {}, &known).headers[0].sha256;
  EXPECT_NE(changed, std::string(64, 'e'));
  EXPECT_EQ(changed, header_state(headers, {}).headers[0].sha256);
}

TEST(NvccRecordText, ReadsExactlyTheGrammar) {
  RecordWriter w;
  w.tag("x").num(42).str("a b\nc").end();
  RecordReader r(w.text());
  ASSERT_TRUE(r.tag_is("x"));
  EXPECT_EQ(r.num(), 42u);
  EXPECT_EQ(r.str(), "a b\nc");
  EXPECT_TRUE(r.end());
  EXPECT_TRUE(r.at_end());
  RecordReader overflow(" 99999999999999999999999\n");
  EXPECT_FALSE(overflow.num());
  RecordReader past(" 10:abc\n");
  EXPECT_FALSE(past.str());
}

}  // namespace
}  // namespace kcache::nvcc
