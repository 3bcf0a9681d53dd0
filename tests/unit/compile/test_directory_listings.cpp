#include "compile/directory_listings.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "compile/header_scanner.hpp"
#include "kcache/compiler.hpp"
#include "kcache/toolkit.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

std::int64_t now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct stat stat_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Identities younger than the racy window (2 s) are not remembered.
void age() { std::this_thread::sleep_for(std::chrono::milliseconds(2100)); }

TEST(DirectoryListings, RoundTripsAndRejectsEveryDeviation) {
  DirectoryListing a;
  a.stamp = {1, 2, 3, 4, 5};
  a.names = {"a.h", "b", "c d"};
  DirectoryListing b;
  b.stamp = {6, 7, 8, 9, 10};
  const std::string text = serialize_directory_listings({a, b});
  const auto back = parse_directory_listings(text);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].stamp, a.stamp);
  EXPECT_EQ((*back)[0].names, a.names);
  EXPECT_TRUE((*back)[1].names.empty());
  EXPECT_EQ(text.rfind("kcache-dir-listings 1\n", 0), 0u);
  // Truncated anywhere, a byte changed, names out of order or invalid, a sign, trailing bytes.
  for (std::size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(parse_directory_listings(text.substr(0, n))) << n;
  }
  EXPECT_FALSE(parse_directory_listings(text + "x"));
  auto swapped = text;
  swapped.replace(swapped.find("3:a.h"), 5, "3:z.h");  // then "b" < "z.h": out of order
  EXPECT_FALSE(parse_directory_listings(swapped));
  for (const std::string& bad : {std::string("1:."), std::string("2:.."), std::string("3:a/b")}) {
    auto t = serialize_directory_listings({a});
    t.replace(t.find("1:b"), 3, bad);
    EXPECT_FALSE(parse_directory_listings(t)) << bad;
  }
  auto signed_text = text;
  signed_text.replace(signed_text.find("dir 1 "), 6, "dir -1 ");
  EXPECT_FALSE(parse_directory_listings(signed_text));
  auto more = text;
  more.replace(more.find(" 3\n"), 3, " 4\n");  // one name more than there are
  EXPECT_FALSE(parse_directory_listings(more));
}

TEST(DirectoryListings, ChangedDirectoryIsReadAgainAndRacyOneIsNotRemembered) {
  test::TempDir tmp;
  const auto d = (tmp.path() / "d").string();
  const auto memo = tmp.path() / "memo";
  fs::create_directories(d);
  test::write_file(d + "/a.h", "a");
  auto l = directory_listing(d, stat_of(d), memo, now());
  ASSERT_TRUE(l);
  EXPECT_EQ(l->names, (std::vector<std::string>{"a.h"}));
  save_directory_listings(memo);
  EXPECT_FALSE(fs::exists(memo / "listings")) << "a directory changed just now must not be remembered";
  age();
  forget_directory_listings();
  ASSERT_TRUE(directory_listing(d, stat_of(d), memo, now()));
  save_directory_listings(memo);
  const auto saved = parse_directory_listings(slurp(memo / "listings"));
  ASSERT_TRUE(saved);
  ASSERT_EQ(saved->size(), 1u);
  EXPECT_EQ((*saved)[0].stamp, stamp_of(stat_of(d)));
  // Added, renamed, removed: each changes the identity, so the listing is read again.
  test::write_file(d + "/b.h", "b");
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"a.h", "b.h"}));
  fs::rename(d + "/a.h", d + "/c.h");
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"b.h", "c.h"}));
  fs::remove(d + "/b.h");
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"c.h"}));
  forget_directory_listings();
}

// The memo is trusted by identity: a file that lists other names for the
// directory's current identity is believed. That is how the test sees that a
// second process answers from the file another wrote (and why the identity
// must hold every timestamp to the nanosecond).
TEST(DirectoryListings, SecondProcessAnswersFromTheFileAndADamagedFileIsIgnored) {
  test::TempDir tmp;
  const auto d = (tmp.path() / "d").string();
  const auto memo = tmp.path() / "memo";
  fs::create_directories(d);
  test::write_file(d + "/real.h", "r");
  age();
  forget_directory_listings();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    forget_directory_listings();
    const bool ok = directory_listing(d, stat_of(d), memo, now()) != nullptr;
    save_directory_listings(memo);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto text = slurp(memo / "listings");
  ASSERT_TRUE(parse_directory_listings(text)) << text;
  // Rewritten by hand with another name for the same identity: believed.
  DirectoryListing planted;
  planted.stamp = stamp_of(stat_of(d));
  planted.names = {"planted.h"};
  test::write_file(memo / "listings", serialize_directory_listings({planted}));
  forget_directory_listings();
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, planted.names);
  // Damaged: ignored whole, the directory is read.
  for (const std::string& damaged : {text.substr(0, text.size() - 1), std::string("kcache-dir-listings 2\nend\n"),
                                    std::string(), std::string("\0\0\0", 3)}) {
    test::write_file(memo / "listings", damaged);
    forget_directory_listings();
    EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"real.h"}));
    save_directory_listings(memo);  // replaces the damaged file
    EXPECT_TRUE(parse_directory_listings(slurp(memo / "listings")));
  }
  // A symlink in its place is not followed.
  fs::remove(memo / "listings");
  test::write_file(tmp.path() / "elsewhere", serialize_directory_listings({planted}));
  fs::create_symlink(tmp.path() / "elsewhere", memo / "listings");
  forget_directory_listings();
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"real.h"}));
  forget_directory_listings();
}

// A deep tree over five include directories, like CuPy's: the scan with the
// listings (remembered on disk, as a new process reads them) finds exactly
// what a scan that remembers nothing finds, before and after headers are
// added, removed and renamed into an earlier directory.
class ListingScan : public ::testing::Test {
protected:
  void SetUp() override {
    for (int d = 0; d < 5; ++d) {
      m_dirs.push_back((m_tmp.path() / ("inc" + std::to_string(d))).string());
    }
    // 5 directories x 14 subdirectories x 10 headers = 700; each includes the
    // next in its subdirectory and one of the next directory's, through the
    // whole search path.
    std::string all;
    for (int d = 0; d < 5; ++d) {
      for (int s = 0; s < 14; ++s) {
        const std::string sub = "lib" + std::to_string(d) + "/s" + std::to_string(s);
        fs::create_directories(m_dirs[d] + "/" + sub);
        for (int h = 0; h < 10; ++h) {
          std::string text = "#pragma once\n#include \"h" + std::to_string((h + 1) % 10) + ".h\"\n";
          text += "#include <lib" + std::to_string((d + 1) % 5) + "/s" + std::to_string(s) + "/h" +
                  std::to_string(h) + ".h>\n#if __has_include(<missing/" + std::to_string(h) + ".h>)\n#include <missing/" +
                  std::to_string(h) + ".h>\n#endif\n";
          test::write_file(m_dirs[d] + "/" + sub + "/h" + std::to_string(h) + ".h", text);
        }
        all += "#include <" + sub + "/h0.h>\n";
      }
    }
    m_source = all + "__global__ void k() {}\n";
    age();
  }

  ScanInput input(const fs::path& memo) const {
    ScanInput in;
    in.source = m_source;
    in.program_name = (m_tmp.path() / "k.cu").string();
    in.include_dirs = m_dirs;
    in.memo_dir = memo;
    return in;
  }

  // The headers a new process finds with the memo, and with none. The header
  // manifests are removed first, so the scan runs (on the remembered listings).
  std::pair<std::vector<HeaderDependency>, std::vector<HeaderDependency>> both() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(m_tmp.path() / "memo", ec)) {
      if (e.path().filename() != "listings") {
        fs::remove_all(e.path());
      }
    }
    forget_scan_memos();
    auto with = scan_headers(input(m_tmp.path() / "memo"));
    forget_scan_memos();
    auto without = scan_headers(input({}));
    forget_scan_memos();
    EXPECT_TRUE(with && without);
    return {with ? with->headers : std::vector<HeaderDependency>{},
            without ? without->headers : std::vector<HeaderDependency>{}};
  }

  test::TempDir m_tmp;
  std::vector<std::string> m_dirs;
  std::string m_source;
};

std::vector<std::string> paths(const std::vector<HeaderDependency>& h) {
  std::vector<std::string> out;
  for (const auto& x : h) {
    out.push_back(x.path);
  }
  return out;
}

TEST_F(ListingScan, SameHeadersWithTheMemoAfterAddRemoveAndRenameIntoAnEarlierDirectory) {
  auto [with, without] = both();
  ASSERT_EQ(with.size(), 700u);
  EXPECT_EQ(paths(with), paths(without));
  EXPECT_TRUE(fs::exists(m_tmp.path() / "memo" / "listings"));
  // Added in an earlier directory: shadows the later one's.
  fs::create_directories(m_dirs[0] + "/lib3/s2");
  test::write_file(m_dirs[0] + "/lib3/s2/h4.h", "// shadow\n");
  // Removed.
  fs::remove(m_dirs[4] + "/lib4/s7/h9.h");
  // Renamed into an earlier directory (a header the tree includes as <lib2/s5/h1.h>).
  fs::create_directories(m_dirs[1] + "/lib2/s5");
  fs::rename(m_dirs[2] + "/lib2/s5/h1.h", m_dirs[1] + "/lib2/s5/h1.h");
  // A name that was missing everywhere appears.
  fs::create_directories(m_dirs[3] + "/missing");
  test::write_file(m_dirs[3] + "/missing/3.h", "// now here\n");
  for (int pass = 0; pass < 2; ++pass) {  // just changed (read again), then old enough to be remembered
    std::tie(with, without) = both();
    const auto p = paths(with);
    EXPECT_EQ(p, paths(without)) << "pass " << pass;
    EXPECT_NE(std::find(p.begin(), p.end(), m_dirs[0] + "/lib3/s2/h4.h"), p.end());
    EXPECT_EQ(std::find(p.begin(), p.end(), m_dirs[4] + "/lib4/s7/h9.h"), p.end());
    EXPECT_NE(std::find(p.begin(), p.end(), m_dirs[1] + "/lib2/s5/h1.h"), p.end());
    EXPECT_EQ(std::find(p.begin(), p.end(), m_dirs[2] + "/lib2/s5/h1.h"), p.end());
    EXPECT_NE(std::find(p.begin(), p.end(), m_dirs[3] + "/missing/3.h"), p.end());
    age();
  }
}

TEST_F(ListingScan, AMemoThatLiesAboutAnOldIdentityIsNotBelieved) {
  auto [with, without] = both();
  ASSERT_EQ(paths(with), paths(without));
  // Plant a listing for the directory's identity as it is now, then change the
  // directory: the planted (stale) listing must no longer answer.
  const std::string d = m_dirs[0] + "/lib0/s0";
  DirectoryListing stale;
  stale.stamp = stamp_of(stat_of(d));
  test::write_file(m_tmp.path() / "memo" / "listings", serialize_directory_listings({stale}));
  test::write_file(d + "/extra.h", "x");
  std::tie(with, without) = both();
  EXPECT_EQ(paths(with), paths(without));
  EXPECT_EQ(with.size(), 700u);
}

// Through the real compiler path: the key a new process derives from the
// remembered listings (and the family's header facts) equals the key of a
// process with no memo at all, before and after a header is renamed into an
// earlier directory; and NVRTC compiles the kernel over that tree.
TEST_F(ListingScan, KeysEqualAProcessWithoutMemoAndNvrtcCompilesTheTree) {
  KCACHE_REQUIRE_TOOLKIT();
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = (m_tmp.path() / "k.cu").string();
  r.source = m_source;
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90"};
  for (const auto& d : m_dirs) {
    r.options.push_back("-I" + d);
  }
  const auto saved = Toolkit::instance().memo_dir();
  Toolkit::instance().set_memo_file(m_tmp.path() / "user" / "kcache-toolkit" / "memo");
  auto key = [&](bool memo, const std::string& define) {
    auto req = r;
    req.options.push_back("-DVARIANT=" + define);
    forget_scan_memos();
    Toolkit::instance().set_memo_dir(memo ? m_tmp.path() / "cache" / "v1" / "toolkit" : std::filesystem::path());
    auto k = derive_key(req);
    EXPECT_TRUE(k) << k.error().describe();
    return k ? k->key().hex() : std::string();
  };
  EXPECT_EQ(key(true, "1"), key(false, "1"));
  EXPECT_EQ(key(true, "2"), key(false, "2"));  // a second kernel: facts from the family's manifest
  EXPECT_TRUE(fs::exists(m_tmp.path() / "user" / "kcache-toolkit" / "listings")) << "kept per user";
  {
    auto out = compile(r, nullptr);
    EXPECT_TRUE(out) << (out ? "" : out.error().describe() + "\n" + out.error().log);
  }
  const auto before = key(true, "3");
  fs::create_directories(m_dirs[0] + "/lib4/s9");
  fs::rename(m_dirs[4] + "/lib4/s9/h3.h", m_dirs[0] + "/lib4/s9/h3.h");
  const auto after = key(true, "3");
  EXPECT_NE(after, before);
  EXPECT_EQ(after, key(false, "3"));
  Toolkit::instance().set_memo_dir(saved);
  Toolkit::instance().set_memo_file(std::nullopt);
  forget_scan_memos();
}

}  // namespace
}  // namespace kcache::jit
