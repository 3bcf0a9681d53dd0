// A manifest's check (manifest_still_applies): recorded directories judged by their
// identity or their names, resolved from an opened directory above them as the kernel does.
#include "deps/header_manifest.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <sys/stat.h>
#include <unistd.h>

#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache::jit {
namespace {

namespace fs = std::filesystem;

// The stamp of what `p` names now.
FileStamp stamp_of_path(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return stamp_of(st);
}

const std::string k_input(64, 'a');

TEST(HeaderManifest, DirectoryStillAppliesWhileItsNamesStayAsTheyWere) {
  test::TempDir tmp;
  const auto dir = (tmp.path() / "d").string();
  fs::create_directories(dir + "/sub");
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({dir, {}, {{"h.h", 'n'}, {"sub", 'x'}}});  // a zero stamp never matches: names decide
  EXPECT_TRUE(manifest_still_applies(m));
  test::write_file(dir + "/unrelated.txt", "x");
  EXPECT_TRUE(manifest_still_applies(m)) << "an unrelated file";
  test::write_file(dir + "/h.h", "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a header that was absent appeared";
  fs::remove(dir + "/h.h");
  fs::remove(dir + "/sub");
  test::write_file(dir + "/sub", "now a file");
  EXPECT_FALSE(manifest_still_applies(m)) << "a directory became a regular file";
}

// A directory judged by its names (its identity changed) is reported with the
// identity it has now, once that identity is older than the racy window and
// unchanged across the check; the copy with it applies by its stat alone, and
// a name that appears afterwards still makes it fail. A racy directory, or one
// whose names no longer hold, is never refreshed.
TEST(HeaderManifest, ADirectoryJudgedByItsNamesIsRefreshedWithItsIdentityNow) {
  test::TempDir tmp;
  const auto dir = (tmp.path() / "d").string();
  fs::create_directories(dir);
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({dir, {}, {{"h.h", 'n'}}});  // recorded with a zero stamp: names decide
  std::vector<RefreshedDir> refreshed;
  ASSERT_TRUE(manifest_still_applies(m, nullptr, &refreshed));
  EXPECT_TRUE(refreshed.empty()) << "created just now: racy, judged by its names again next time";
  ::sleep(static_cast<unsigned>(k_racy_window_ns / 1'000'000'000) + 1);
  ASSERT_TRUE(manifest_still_applies(m, nullptr, &refreshed));
  ASSERT_EQ(refreshed.size(), 1U);
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(refreshed[0].index, 0U);
  EXPECT_TRUE(refreshed[0].stamp == stamp_of(st));
  const HeaderManifest fresh = with_refreshed_dirs(m, refreshed);
  EXPECT_TRUE(fresh.dirs[0].stamp == stamp_of(st));
  EXPECT_EQ(fresh.dirs[0].names, m.dirs[0].names);
  std::vector<RefreshedDir> again;
  ASSERT_TRUE(manifest_still_applies(fresh, nullptr, &again));
  EXPECT_TRUE(again.empty()) << "the same identity: nothing to refresh";
  test::write_file(dir + "/h.h", "x");
  EXPECT_FALSE(manifest_still_applies(fresh, nullptr, &again)) << "the absent header appeared after the refresh";
  EXPECT_TRUE(again.empty());
  EXPECT_FALSE(manifest_still_applies(m, nullptr, &again));
  EXPECT_TRUE(again.empty());
}

// A changed directory's names are judged by a lookup of each or by a
// listing; both give the recorded verdict in every case: absent, a regular
// file, a directory, a symbolic link to either, a dangling one.
TEST(HeaderManifest, ADirectorysNamesJudgeAlikeLookedUpOrListed) {
  test::TempDir tmp;
  const fs::path d = tmp.path() / "d";
  fs::create_directories(d);
  for (int i = 0; i < 40; ++i) {
    test::write_file((d / ("other" + std::to_string(i) + ".h")).string(), "x");  // unrelated entries
  }
  test::write_file((tmp.path() / "file").string(), "x");
  fs::create_directories(tmp.path() / "dir");
  const auto clear = [&] { fs::remove_all(d / "a"); };
  struct Case {
    const char* what;
    std::function<void()> make;
    bool n, x, f;  // the verdict for a recorded 'n', 'x', 'f'
  };
  const std::vector<Case> cases = {
      {"absent", [] {}, true, true, true},
      {"a regular file", [&] { test::write_file((d / "a").string(), "x"); }, false, false, true},
      {"a directory", [&] { fs::create_directories(d / "a"); }, false, true, false},
      {"a link to a file", [&] { fs::create_symlink(tmp.path() / "file", d / "a"); }, false, false, true},
      {"a link to a directory", [&] { fs::create_directory_symlink(tmp.path() / "dir", d / "a"); }, false, true, false},
      {"a dangling link", [&] { fs::create_symlink(tmp.path() / "nothing", d / "a"); }, false, true, true},
  };
  for (const auto& c : cases) {
    clear();
    c.make();
    for (const auto& [what, expected] : {std::pair{'n', c.n}, std::pair{'x', c.x}, std::pair{'f', c.f}}) {
      const std::vector<std::pair<std::string, char>> names = {{"0.h", 'n'}, {"a", what}, {"zz", 'x'}};
      EXPECT_EQ(names_still_apply(d.c_str(), names, NameCheck::each_name), expected) << c.what << ", " << what;
      EXPECT_EQ(names_still_apply(d.c_str(), names, NameCheck::listing), expected) << c.what << ", " << what;
    }
  }
  clear();
  for (const auto how : {NameCheck::each_name, NameCheck::listing}) {
    EXPECT_FALSE(names_still_apply(d.c_str(), {}, how)) << "no names decide nothing";
    EXPECT_FALSE(names_still_apply((d / "missing").c_str(), {{"a", 'n'}}, how)) << "no directory";
  }
}

// A check looks up the few names of a large changed directory (a build's
// working directory) instead of listing it, and lists a small one whose
// names are many; the verdicts are those above.
TEST(HeaderManifest, AChangedDirectoryIsListedOnlyWhereItsNamesAreMany) {
  test::TempDir tmp;
  const fs::path big = tmp.path() / "big";
  const fs::path small = tmp.path() / "small";
  fs::create_directories(big);
  fs::create_directories(small);
  for (int i = 0; i < 3000; ++i) {
    test::write_file((big / ("output" + std::to_string(i) + ".ptx")).string(), "x");
  }
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({big.string(), {}, {{"a.h", 'n'}, {"b.h", 'n'}}});  // zero stamps: the names decide
  std::vector<std::pair<std::string, char>> many;
  for (int i = 0; i < 400; ++i) {
    many.emplace_back("n" + std::to_string(1000 + i) + ".h", 'n');
  }
  m.dirs.push_back({small.string(), {}, many});
  auto listings = manifest_dir_listings();
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_EQ(manifest_dir_listings() - listings, 1u) << "the small directory with 400 names is listed, the big one not";
  test::write_file((big / "b.h").string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a name of the big directory appeared";
  fs::remove(big / "b.h");
  test::write_file((small / "n1399.h").string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a name of the small directory appeared";
}

// A directory recorded with no names (nothing was looked up in it) stands
// for which directory the path names: it applies while that is the same
// directory, whatever is written in it or however recently, and not once
// the path names another directory, a file or nothing.
TEST(HeaderManifest, ADirectoryWithNoNamesAppliesWhileItIsTheSameDirectory) {
  test::TempDir tmp;
  const fs::path d = tmp.path() / "inc";
  fs::create_directories(d);
  struct stat st {};
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({d.string(), stamp_of(st), {}});
  EXPECT_TRUE(manifest_still_applies(m));
  test::write_file((d / "output.ptx").string(), "x");  // its identity changes
  EXPECT_TRUE(manifest_still_applies(m)) << "its content decides nothing";
  m.dirs[0].stamp = FileStamp{m.dirs[0].stamp.dev, m.dirs[0].stamp.ino, 0, 0, 0};  // as a racy one is recorded
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup)));
  fs::rename(d, tmp.path() / "old");
  fs::create_directories(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "another directory at the path";
  fs::remove(d);
  fs::create_directory_symlink(tmp.path() / "old", d);
  EXPECT_TRUE(manifest_still_applies(m)) << "a symbolic link to the same directory resolves as the compiler's open does";
  fs::remove(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "no directory";
  test::write_file(d.string(), "x");
  EXPECT_FALSE(manifest_still_applies(m)) << "a file";
  m.dirs[0].stamp = FileStamp{};
  fs::remove(d);
  fs::create_directories(d);
  EXPECT_FALSE(manifest_still_applies(m)) << "an all-zero stamp (older manifests) never matches";
}

// Directories are resolved from an opened directory above them as the kernel
// resolves the whole path: "link/.." is the symlink target's parent, never
// the lexical one.
TEST(HeaderManifest, ADirectoryBelowAnOpenedOneResolvesAsItsWholePath) {
  test::TempDir tmp;
  const std::string a = (tmp.path() / "a").string();
  const std::string b = (tmp.path() / "b").string();
  fs::create_directories(a + "/real");
  fs::create_directories(b + "/inner");
  fs::create_directory_symlink(b + "/inner", a + "/link");
  test::write_file(a + "/real/h.h", "#define H 1\n");
  const auto stamp = stamp_of_path;
  HeaderManifest m;
  m.input = k_input;
  m.headers.push_back({a + "/real/h.h", stamp(a + "/real/h.h"), std::string(64, 'b'), {}});
  m.dirs.push_back({a, stamp(a), {{"y.h", 'n'}}});
  m.dirs.push_back({a + "/link", stamp(a + "/link"), {{"y.h", 'n'}}});
  m.dirs.push_back({a + "/link/..", stamp(b), {{"x.h", 'n'}}});
  m.dirs.push_back({a + "/real", stamp(a + "/real"), {{"y.h", 'n'}}});
  const auto lookup = parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(a + "/x.h", "x");  // beside the lexical parent of "link/..": not the one recorded
  EXPECT_TRUE(manifest_still_applies(m));
  EXPECT_TRUE(manifest_still_applies(*lookup));
  test::write_file(b + "/x.h", "x");  // in the physical one
  EXPECT_FALSE(manifest_still_applies(m));
  EXPECT_FALSE(manifest_still_applies(*lookup));
  fs::remove(b + "/x.h");
  EXPECT_TRUE(manifest_still_applies(*lookup));
  const std::vector<bool> trusted{false, false, true, false};
  test::write_file(b + "/x.h", "x");
  EXPECT_TRUE(manifest_still_applies(*lookup, &trusted)) << "a trusted directory is not checked";
  test::write_file(a + "/real/h.h", "#define H 2\n");
  EXPECT_FALSE(manifest_still_applies(*lookup, &trusted)) << "its headers still are";
}

// "X/.." where X is a real directory is the directory X was opened from: a
// check answers it with the stat it took of that one (CuPy's tree records
// half its directories so), and still resolves it physically once X is a
// symbolic link.
TEST(HeaderManifest, ADotDotBelowARealDirectoryCostsNoStatOfItsOwn) {
  test::TempDir tmp;
  const std::string inc = (tmp.path() / "inc").string();
  const std::string elsewhere = (tmp.path() / "elsewhere").string();
  constexpr int k = 8;
  const auto stamp = stamp_of_path;
  for (int i = 0; i < k; ++i) {
    fs::create_directories(inc + "/x" + std::to_string(i));
    test::write_file(inc + "/x" + std::to_string(i) + "/h.h", "#define H 1\n");
  }
  fs::create_directories(elsewhere + "/inner");
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({inc, stamp(inc), {{"y.h", 'n'}}});
  for (int i = 0; i < k; ++i) {
    const std::string x = inc + "/x" + std::to_string(i);
    m.headers.push_back({x + "/h.h", stamp(x + "/h.h"), std::string(64, 'b'), {}});
    m.dirs.push_back({x, stamp(x), {{"y.h", 'n'}}});
    m.dirs.push_back({x + "/..", stamp(inc), {{"nothere", 'n'}}});
  }
  const auto lookup = parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  const auto before = manifest_check_calls();
  EXPECT_TRUE(manifest_still_applies(*lookup));
  // inc: an open and a stat; each x: an open, a stat, its header's stat, and
  // nothing for "x/..", where a stat each made it 4 per x.
  EXPECT_EQ(manifest_check_calls() - before, 2u + 3u * k);

  // x0 becomes a symbolic link to a directory whose parent holds "nothere":
  // inc changed, and "x0/.." is that parent, checked as such.
  fs::rename(inc + "/x0", elsewhere + "/inner/x0");
  fs::create_directory_symlink(elsewhere + "/inner/x0", inc + "/x0");
  EXPECT_TRUE(manifest_still_applies(*lookup)) << "same names, same header identities";
  fs::create_directories(elsewhere + "/inner/nothere");
  EXPECT_FALSE(manifest_still_applies(*lookup)) << "x0/.. resolves through the link";
}
// A directory with one recorded directory below it and no header of its own
// (a toolkit's `include` above `include/cccl`) is stat'ed by its path, as is the
// one below: two calls, where opening the upper one cost an open, a stat, the
// stat of the lower one through it and a close. A change of either is seen.
TEST(HeaderManifest, ADirectoryWithOneBelowItAndNoHeaderIsNotOpened) {
  test::TempDir tmp;
  const std::string inc = (tmp.path() / "include").string();
  const std::string cccl = inc + "/cccl";
  fs::create_directories(cccl);
  const auto stamp = stamp_of_path;
  HeaderManifest m;
  m.input = k_input;
  m.dirs.push_back({inc, stamp(inc), {{"a.h", 'n'}}});
  m.dirs.push_back({cccl, stamp(cccl), {{"a.h", 'n'}}});
  const auto lookup = parse_manifest(serialize_manifest(m), k_input, ManifestPart::lookup);
  ASSERT_TRUE(lookup);
  for (const HeaderManifest* which : {static_cast<const HeaderManifest*>(&m), &*lookup}) {
    const auto before = manifest_check_calls();
    EXPECT_TRUE(manifest_still_applies(*which));
    EXPECT_EQ(manifest_check_calls() - before, 2u);
  }
  test::write_file(cccl + "/a.h", "#define A 1\n");  // the lower one gains the name recorded absent
  EXPECT_FALSE(manifest_still_applies(m));
  EXPECT_FALSE(manifest_still_applies(*lookup));
  fs::remove(cccl + "/a.h");
  test::write_file(inc + "/a.h", "#define A 1\n");  // and the upper one
  EXPECT_FALSE(manifest_still_applies(m));
  EXPECT_FALSE(manifest_still_applies(*lookup));
}
}  // namespace
}  // namespace kcache::jit
