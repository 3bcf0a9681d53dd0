// The toolkit's include names (deps/toolkit_includes.hpp) from a small
// toolkit tree laid out as CUDA's is (`include` a symlink into `targets/`):
// what one scan records, that its memo file serves the next process, and
// that a memo of another format version is read as none and written again.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "deps/toolkit_includes.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "util/sha256.hpp"
#include "util/single_threaded.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

class ToolkitIncludesTest : public ::testing::Test {
protected:
  void SetUp() override {
    forget_toolkit_includes();
    real = tmp.path() / "cuda" / "targets" / "x86_64-linux" / "include";
    fs::create_directories(real / "sub");
    test::write_file(real / "a.h", "#include <sub/b.h>\n#include \"near.h\"\n");
    test::write_file(real / "near.h", "// nothing\n");
    test::write_file(real / "sub" / "b.h",
                     "#define KC_HDR(x) <sub/x>\n#include KC_HDR(c.h)\n#define KC_PLAIN 1\n");
    test::write_file(real / "sub" / "c.h", "int c;\n");
    // A symlink to a directory is not entered; a symlink to a file is read.
    fs::create_directory_symlink("sub", real / "linked");
    fs::create_symlink("sub/c.h", real / "c_link.h");
    fs::create_directory_symlink("targets/x86_64-linux/include", tmp.path() / "cuda" / "include");
    root = fs::canonical(tmp.path() / "cuda");
    canonical_include = fs::canonical(real).string();
    memo = tmp.path() / "user";
    fs::create_directories(memo);
  }
  void TearDown() override { forget_toolkit_includes(); }

  // The memo file toolkit_includes() keeps for `root` with fingerprint "fp".
  fs::path memo_file() const {
    const std::string id = util::sha256_hex("kcache-toolkit-includes-3\n" + root.string() + "\nfp");
    return memo / ("toolkit-" + id.substr(0, 32));
  }

  // Checks what a scan of the tree must hold, whether scanned or read from the memo.
  void expect_tree(const ToolkitIncludes& t) const {
    std::vector<std::string> files;
    for (const auto& [file, names] : t.names_of) {
      files.push_back(file);
    }
    const std::string i = canonical_include;
    EXPECT_EQ(files, (std::vector<std::string>{i + "/a.h", i + "/c_link.h", i + "/near.h", i + "/sub/b.h",
                                               i + "/sub/c.h"}));
    EXPECT_EQ(t.names_of.at(i + "/a.h"), (std::vector<std::string>{"sub/b.h", "near.h"}));
    EXPECT_EQ(t.names_of.at(i + "/sub/b.h"), (std::vector<std::string>{"sub/c.h"})) << "the computed include, expanded";
    const auto* plain = t.find_define("KC_PLAIN");
    ASSERT_NE(plain, nullptr);
    ASSERT_EQ(plain->size(), 1u);
    EXPECT_EQ(plain->front().body, "1");
    EXPECT_EQ(t.find_define("KC_NONE"), nullptr);
  }

  test::TempDir tmp;
  fs::path real;
  fs::path root;
  std::string canonical_include;
  fs::path memo;
};

TEST_F(ToolkitIncludesTest, NamesEveryHeaderByItsCanonicalPathAndTheMemoServesTheNextProcess) {
  const auto scanned = toolkit_includes(root, "fp", memo);
  ASSERT_NE(scanned, nullptr);
  expect_tree(*scanned);
  const std::string text = test::read_file(memo_file());
  ASSERT_EQ(text.rfind("kcache-toolkit-includes 3\n", 0), 0u) << text;

  // A new process: the memo, not the tree. An edit of the tree is not seen
  // (the fingerprint names the toolkit's headers), which proves the memo was read.
  forget_toolkit_includes();
  test::write_file(real / "near.h", "#include <sub/c.h>\n");
  const auto read = toolkit_includes(root, "fp", memo);
  ASSERT_NE(read, nullptr);
  expect_tree(*read);
  EXPECT_EQ(read->raw_defines, scanned->raw_defines);
}

TEST_F(ToolkitIncludesTest, AMemoOfAnotherVersionOrDamagedIsScannedAgainAndRewritten) {
  for (const std::string& old : {std::string("kcache-toolkit-includes 1\nfile 5:/x.h\nname 3:y.h\nend\n"),
                                std::string("kcache-toolkit-includes 2\nfile 5:/x.h\nname 3:y.h\nend\n"),
                                std::string("kcache-toolkit-includes 3\nfile 5:/x.h\nname 9:y.h\nend\n"),
                                std::string("kcache-toolkit-includes 4\nend\n")}) {
    forget_toolkit_includes();
    test::write_file(memo_file(), old);
    const auto t = toolkit_includes(root, "fp", memo);
    ASSERT_NE(t, nullptr);
    EXPECT_FALSE(t->names_of.contains("/x.h")) << old;
    expect_tree(*t);
    const std::string text = test::read_file(memo_file());
    EXPECT_EQ(text.rfind("kcache-toolkit-includes 3\nfile ", 0), 0u) << "rewritten: " << text;
    EXPECT_NE(text, old);
  }
}

// A read ahead is worth a thread while the process does not hold the
// toolkit; in a process that never had a second thread, only where no memo
// file of the toolkit exists (the headers themselves must be read).
TEST_F(ToolkitIncludesTest, WorthPrefetchingUntilTheProcessHoldsTheToolkitAndOnlyAFirstUseInOneThread) {
  EXPECT_TRUE(toolkit_includes_worth_prefetching(root, "fp", memo));
  ASSERT_NE(toolkit_includes(root, "fp", memo), nullptr);
  ASSERT_TRUE(fs::is_regular_file(memo_file()));
  EXPECT_FALSE(toolkit_includes_worth_prefetching(root, "fp", memo)) << "held by the process";
  EXPECT_TRUE(toolkit_includes_worth_prefetching(root, "another fingerprint", memo)) << "no memo file of that one";
  forget_toolkit_includes();
  // The memo file exists, in the user's directory or in the fallback.
  const bool threads = !util::process_is_single_threaded();
  EXPECT_EQ(toolkit_includes_worth_prefetching(root, "fp", memo), threads);
  EXPECT_EQ(toolkit_includes_worth_prefetching(root, "fp", tmp.path() / "empty", memo), threads);
  EXPECT_TRUE(toolkit_includes_worth_prefetching(root, "fp", tmp.path() / "empty"));
  fs::remove(memo_file());
  fs::create_symlink(tmp.path() / "cuda" / "include" / "a.h", memo_file());
  EXPECT_TRUE(toolkit_includes_worth_prefetching(root, "fp", memo)) << "a symlink is no memo file";
}

}  // namespace
}  // namespace kcache::jit
