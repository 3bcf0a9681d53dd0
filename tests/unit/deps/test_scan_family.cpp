// Another kernel over the same header tree takes a family member's result
// when its roots are the same (deps/scan_inputs.hpp), and only then.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "deps/header_scanner.hpp"
#include "deps/scan_inputs.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

// Identities younger than the racy window (2 s) are never trusted.
void age() { std::this_thread::sleep_for(std::chrono::milliseconds(2100)); }

std::size_t manifests_in(const fs::path& memo) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(memo)) {
    const auto name = e.path().filename().string();
    n += e.is_regular_file() && name.size() == 64 ? 1 : 0;
  }
  return n;
}

fs::path family_file_in(const fs::path& memo) {
  for (const auto& e : fs::recursive_directory_iterator(memo)) {
    if (e.path().filename().string().rfind("family-", 0) == 0) {
      return e.path();
    }
  }
  return {};
}

std::vector<std::string> names_of(const ScanResult& r) {
  std::vector<std::string> out;
  for (const auto& h : r.headers) {
    out.push_back(fs::path(h.path).filename().string());
  }
  return out;
}

class ScanFamily : public ::testing::Test {
protected:
  void SetUp() override {
    inc = (tmp.path() / "inc").string();
    fs::create_directories(inc);
    // a.h names its next header through a macro: -D NAME (a looked-up
    // identifier) decides the closure, -D OTHER does not.
    test::write_file(inc + "/a.h", "#define PICK(x) <x.h>\n#include PICK(NAME)\n");
    test::write_file(inc + "/c1.h", "#define C 1\n");
    test::write_file(inc + "/c2.h", "#define C 2\n");
    test::write_file(inc + "/b.h", "#define B 1\n");
    memo = tmp.path() / "memo";
    age();
  }

  // One scan in a "new process" (no in-process memo).
  Result<ScanResult> scan(const std::string& source, std::vector<std::string> defines) {
    forget_scan_memos();
    ScanInput in;
    in.source = source;
    in.program_name = (tmp.path() / "k.cu").string();
    in.include_dirs = {inc};
    in.defines = std::move(defines);
    in.memo_dir = memo;
    return scan_headers(in);
  }

  test::TempDir tmp;
  std::string inc;
  fs::path memo;
};

TEST_F(ScanFamily, SameRootsReuseWithoutAScanOrAManifestAndOtherRootsScan) {
  const auto first = scan("#include <a.h>\nint k1;\n", {"NAME=c1", "OTHER=1"});
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(names_of(*first), (std::vector<std::string>{"a.h", "c1.h"}));
  const auto manifests = manifests_in(memo);
  ASSERT_FALSE(family_file_in(memo).empty());

  // Another body and a -D no computed include looks up: the same roots.
  const auto same = scan("#include <a.h>\nint k2;\n", {"NAME=c1", "OTHER=2"});
  ASSERT_TRUE(same);
  EXPECT_TRUE(same->reused);
  EXPECT_EQ(same->headers, first->headers);
  EXPECT_EQ(manifests_in(memo), manifests) << "a reuse writes no manifest";
  EXPECT_NE(same->checks, nullptr) << "an in-process re-derivation re-checks the member's manifest";

  // A -D of an identifier a computed include looked up: other roots.
  const auto other_define = scan("#include <a.h>\nint k3;\n", {"NAME=c2", "OTHER=1"});
  ASSERT_TRUE(other_define);
  EXPECT_FALSE(other_define->reused);
  EXPECT_EQ(names_of(*other_define), (std::vector<std::string>{"a.h", "c2.h"}));

  // The source's own #define of it: other roots too.
  const auto source_define = scan("#define NAME c2\n#include <a.h>\nint k4;\n", {"NAME=c1"});
  ASSERT_TRUE(source_define);
  EXPECT_FALSE(source_define->reused);
  EXPECT_EQ(names_of(*source_define), (std::vector<std::string>{"a.h", "c1.h", "c2.h"}));

  // Another include in the source: other roots.
  const auto more = scan("#include <a.h>\n#include <b.h>\nint k5;\n", {"NAME=c1"});
  ASSERT_TRUE(more);
  EXPECT_FALSE(more->reused);
  EXPECT_EQ(names_of(*more), (std::vector<std::string>{"a.h", "b.h", "c1.h"}));

  // Each of the four is a member now: every one is found again by its roots.
  EXPECT_EQ(family_members(memo, family_file_in(memo).filename().string().substr(7)).size(), 4u);
  const auto again = scan("#include <a.h>\nint k6;\n", {"OTHER=3", "NAME=c2"});
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(again->headers, other_define->headers);
}

TEST_F(ScanFamily, AChangedHeaderIsReadAgainAndARacyOneIsNeverTrusted) {
  const auto first = scan("#include <a.h>\nint k1;\n", {"NAME=c1"});
  ASSERT_TRUE(first);
  test::write_file(inc + "/c1.h", "#define C 11\n");
  const auto changed = scan("#include <a.h>\nint k2;\n", {"NAME=c1"});
  ASSERT_TRUE(changed);
  EXPECT_FALSE(changed->reused) << "the member's manifest no longer applies";
  ASSERT_EQ(changed->headers.size(), 2u);
  EXPECT_NE(changed->headers[1].sha256, first->headers[1].sha256);
  // c1.h is younger than the racy window: its manifest records no identity
  // for it, so no member can stand for a scan yet.
  const auto racy = scan("#include <a.h>\nint k3;\n", {"NAME=c1"});
  ASSERT_TRUE(racy);
  EXPECT_FALSE(racy->reused);
  EXPECT_EQ(racy->headers, changed->headers);
  age();
  (void)scan("#include <a.h>\nint k4;\n", {"NAME=c1"});  // a member with c1.h's identity
  const auto settled = scan("#include <a.h>\nint k5;\n", {"NAME=c1"});
  ASSERT_TRUE(settled);
  EXPECT_TRUE(settled->reused);
  EXPECT_EQ(settled->headers, changed->headers);
}

TEST_F(ScanFamily, ADamagedFamilyFileIsIgnoredAndReplaced) {
  const auto first = scan("#include <a.h>\nint k1;\n", {"NAME=c1"});
  ASSERT_TRUE(first);
  const fs::path file = family_file_in(memo);
  ASSERT_FALSE(file.empty());
  const std::string family = file.filename().string().substr(7);
  ASSERT_EQ(family_members(memo, family).size(), 1u);
  const std::string good = test::read_file(file);
  for (const std::string& bad :
       {std::string("kcache-header-family 1\n") + std::string(64, 'a') + "\n", good.substr(0, good.size() - 1),
        good + "x", std::string(), std::string("kcache-header-family 2\nm ") + std::string(64, 'A') + " " +
                                        std::string(64, 'b') + " 0\nend\n"}) {
    test::write_file(file, bad);
    EXPECT_TRUE(family_members(memo, family).empty()) << bad;
    const auto r = scan("#include <a.h>\nint k2;\n", {"NAME=c1"});
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->reused) << "no member can be read";
    EXPECT_EQ(r->headers, first->headers);
    EXPECT_EQ(family_members(memo, family).size(), 1u) << "the scan names itself a member again";
    fs::remove_all(memo);  // the next round starts without the scanned manifest
    (void)scan("#include <a.h>\nint k1;\n", {"NAME=c1"});
  }
  // Identifiers sorted and unique, or the member is refused whole.
  const std::string head = "kcache-header-family 2\nm " + std::string(64, 'a') + " " + std::string(64, 'b') + " 2\n";
  test::write_file(file, head + "i 1:a\ni 1:b\nend\n");
  EXPECT_EQ(family_members(memo, family).size(), 1u);
  test::write_file(file, head + "i 1:b\ni 1:a\nend\n");
  EXPECT_TRUE(family_members(memo, family).empty());
  test::write_file(file, head + "i 1:a\ni 1:a\nend\n");
  EXPECT_TRUE(family_members(memo, family).empty());
  // A symlink in its place is not followed.
  fs::remove(file);
  fs::create_symlink(tmp.path() / "elsewhere", file);
  test::write_file(tmp.path() / "elsewhere", good);
  EXPECT_TRUE(family_members(memo, family).empty());
}

}  // namespace
}  // namespace kcache::jit
