#include "deps/directory_listings.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <thread>

#include "deps/header_scanner.hpp"
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

// A temporary directory `d` holding `files`, old enough to be remembered,
// and a memo directory beside it.
struct AgedDirectory {
  explicit AgedDirectory(std::initializer_list<const char*> files) {
    fs::create_directories(d);
    for (const char* f : files) {
      test::write_file(d + "/" + f, f);
    }
    age();
  }
  test::TempDir tmp;
  const std::string d = (tmp.path() / "d").string();
  const fs::path memo = tmp.path() / "memo";
};

TEST(DirectoryListings, RoundTripsAndRejectsEveryDeviation) {
  DirectoryListing a;
  a.stamp = {1, 2, 3, 4, 5};
  a.names = {"a.h", "b", "c d"};
  const std::string text = serialize_directory_listing(a);
  const auto back = parse_directory_listing(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->stamp, a.stamp);
  EXPECT_EQ(back->names, a.names);
  DirectoryListing empty;
  empty.stamp = {6, 7, 8, 9, 10};
  ASSERT_TRUE(parse_directory_listing(serialize_directory_listing(empty)));
  EXPECT_TRUE(parse_directory_listing(serialize_directory_listing(empty))->names.empty());
  EXPECT_EQ(text.rfind("kcache-dir-listing 2\n", 0), 0u);
  // Truncated anywhere, a byte changed, names out of order or invalid, a sign,
  // trailing bytes, a second listing, the version-1 magic.
  for (std::size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(parse_directory_listing(text.substr(0, n))) << n;
  }
  EXPECT_FALSE(parse_directory_listing(text + "x"));
  auto two = text;
  two.insert(two.size() - 4, "dir 6 7 8 9 10 0\n");
  EXPECT_FALSE(parse_directory_listing(two));
  auto v1 = text;
  v1.replace(0, 21, "kcache-dir-listings 1\n");
  EXPECT_FALSE(parse_directory_listing(v1));
  auto swapped = text;
  swapped.replace(swapped.find("3:a.h"), 5, "3:z.h");  // then "b" < "z.h": out of order
  EXPECT_FALSE(parse_directory_listing(swapped));
  for (const std::string& bad : {std::string("1:."), std::string("2:.."), std::string("3:a/b")}) {
    auto t = text;
    t.replace(t.find("1:b"), 3, bad);
    EXPECT_FALSE(parse_directory_listing(t)) << bad;
  }
  auto signed_text = text;
  signed_text.replace(signed_text.find("dir 1 "), 6, "dir -1 ");
  EXPECT_FALSE(parse_directory_listing(signed_text));
  auto more = text;
  more.replace(more.find(" 3\n"), 3, " 4\n");  // one name more than there are
  EXPECT_FALSE(parse_directory_listing(more));
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
  const auto file = listing_file(memo, stat_of(d).st_dev, stat_of(d).st_ino);
  EXPECT_FALSE(fs::exists(file)) << "a directory changed just now must not be remembered";
  age();
  forget_directory_listings();
  ASSERT_TRUE(directory_listing(d, stat_of(d), memo, now()));
  save_directory_listings(memo);
  const auto saved = parse_directory_listing(slurp(file));
  ASSERT_TRUE(saved);
  EXPECT_EQ(saved->stamp, stamp_of(stat_of(d)));
  EXPECT_EQ((fs::status(file).permissions() & fs::perms::all), fs::perms::owner_read | fs::perms::owner_write);
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
  AgedDirectory a{"real.h"};
  const std::string& d = a.d;
  const fs::path& memo = a.memo;
  test::TempDir& tmp = a.tmp;
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
  const auto file = listing_file(memo, stat_of(d).st_dev, stat_of(d).st_ino);
  const auto text = slurp(file);
  ASSERT_TRUE(parse_directory_listing(text)) << text;
  // Rewritten by hand with another name for the same identity: believed.
  DirectoryListing planted;
  planted.stamp = stamp_of(stat_of(d));
  planted.names = {"planted.h"};
  test::write_file(file, serialize_directory_listing(planted));
  forget_directory_listings();
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, planted.names);
  // Damaged: ignored, the directory is read.
  for (const std::string& damaged : {text.substr(0, text.size() - 1), std::string("kcache-dir-listing 3\nend\n"),
                                    std::string(), std::string("\0\0\0", 3)}) {
    test::write_file(file, damaged);
    forget_directory_listings();
    EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"real.h"}));
    save_directory_listings(memo);  // replaces the damaged file
    EXPECT_TRUE(parse_directory_listing(slurp(file)));
  }
  // Another directory's listing under this one's name: not believed.
  DirectoryListing other = planted;
  other.stamp.ino += 1;
  test::write_file(file, serialize_directory_listing(other));
  forget_directory_listings();
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"real.h"}));
  // A symlink in its place is not followed.
  fs::remove(file);
  test::write_file(tmp.path() / "elsewhere", serialize_directory_listing(planted));
  fs::create_symlink(tmp.path() / "elsewhere", file);
  forget_directory_listings();
  EXPECT_EQ(directory_listing(d, stat_of(d), memo, now())->names, (std::vector<std::string>{"real.h"}));
  forget_directory_listings();
}

// The issue-23 scalability bug: one file of every listing, parsed whole by a
// process's first lookup, made a one-directory lookup cost 5-7 ms once the
// memo held a few thousand listings. Now a lookup reads its own directory's
// file only, however many listings are remembered (asserted on bytes read),
// and a save keeps every shard, so the whole memo, within its bounds.
TEST(DirectoryListings, ALookupReadsOnlyItsOwnListingAmongTwentyThousand) {
  AgedDirectory a{"real.h", "new.h"};
  const std::string& d = a.d;
  const fs::path& memo = a.memo;
  forget_directory_listings();
  ASSERT_TRUE(directory_listing(d, stat_of(d), memo, now()));
  save_directory_listings(memo);
  const auto own = listing_file(memo, stat_of(d).st_dev, stat_of(d).st_ino);
  const auto own_bytes = fs::file_size(own);
  // 20 000 unrelated listings (other inodes of the same device), as many
  // processes over many trees leave them, written straight into the layout.
  DirectoryListing stranger;
  stranger.names = {"a.h", "b.h", "some_longer_header_name.cuh"};
  const auto dev = static_cast<std::uint64_t>(stat_of(d).st_dev);
  std::uint64_t on_disk = 0;
  for (std::uint64_t i = 0; i < 20000; ++i) {
    stranger.stamp = {dev, 1000000000 + i, 4096, 1, 1};
    const auto f = listing_file(memo, stranger.stamp.dev, stranger.stamp.ino);
    fs::create_directories(f.parent_path());
    const auto text = serialize_directory_listing(stranger);
    test::write_file(f, text);
    on_disk += text.size();
  }
  forget_directory_listings();
  const auto before = listing_bytes_read();
  const auto l = directory_listing(d, stat_of(d), memo, now());
  ASSERT_TRUE(l);
  EXPECT_EQ(l->names, (std::vector<std::string>{"new.h", "real.h"}));
  EXPECT_EQ(listing_bytes_read() - before, own_bytes) << "of " << on_disk << " bytes remembered";
  // A second lookup in the process is answered from memory.
  ASSERT_TRUE(directory_listing(d, stat_of(d), memo, now()));
  EXPECT_EQ(listing_bytes_read() - before, own_bytes);
  // A save into the crowded memo brings the shard it writes to within its
  // share of the bounds (the oldest go) and keeps the new listing.
  // (Its own file removed, the directory is read and saved again.)
  fs::remove(own);
  forget_directory_listings();
  ASSERT_TRUE(directory_listing(d, stat_of(d), memo, now()));
  const auto file = own;
  // Crowd that shard well past its share (older files than the one saved next).
  for (std::uint64_t ino = 2000000000, crowd = 0; crowd < 2 * k_max_listings / k_listing_shards; ++ino) {
    stranger.stamp = {dev, ino, 4096, 1, 1};
    if (listing_file(memo, dev, ino).parent_path() == file.parent_path()) {
      test::write_file(listing_file(memo, dev, ino), serialize_directory_listing(stranger));
      ++crowd;
    }
  }
  test::write_file(file.parent_path() / "leftover.tmp", "x");  // a killed writer's temporary, just now
  save_directory_listings(memo);
  std::size_t files = 0;
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(file.parent_path())) {
    ++files;
    bytes += e.file_size();
  }
  EXPECT_LE(files, k_max_listings / k_listing_shards + 1) << "the listings, and the young temporary";
  EXPECT_LE(bytes, k_max_listings_bytes / k_listing_shards + 1);
  EXPECT_TRUE(fs::exists(file.parent_path() / "leftover.tmp")) << "a temporary is swept only once old";
  ASSERT_TRUE(parse_directory_listing(slurp(file)));
  EXPECT_EQ(parse_directory_listing(slurp(file))->names, (std::vector<std::string>{"new.h", "real.h"}));
  forget_directory_listings();
}

// A version-1 memo (one file of every listing) is not read, and the next save removes it.
TEST(DirectoryListings, VersionOneFileIsIgnoredAndRemoved) {
  AgedDirectory a{"real.h"};
  const std::string& d = a.d;
  const fs::path& memo = a.memo;
  const auto st = stat_of(d);
  const auto stamp = stamp_of(st);
  test::write_file(memo / "listings", "kcache-dir-listings 1\ndir " + std::to_string(stamp.dev) + " " +
                                          std::to_string(stamp.ino) + " " + std::to_string(stamp.size) + " " +
                                          std::to_string(stamp.mtime_ns) + " " + std::to_string(stamp.ctime_ns) +
                                          " 1\n9:planted.h\nend\n");
  forget_directory_listings();
  const auto before = listing_bytes_read();
  EXPECT_EQ(directory_listing(d, st, memo, now())->names, (std::vector<std::string>{"real.h"}));
  EXPECT_EQ(listing_bytes_read(), before);
  save_directory_listings(memo);
  EXPECT_FALSE(fs::exists(memo / "listings"));
  EXPECT_TRUE(fs::exists(listing_file(memo, stamp.dev, stamp.ino)));
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
      if (e.path().filename() != "listings.2") {
        fs::remove_all(e.path());
      }
    }
    forget_scan_memos();
    auto with = scan_headers(input(m_tmp.path() / "memo"));
    forget_scan_memos();
    auto without = scan_headers(input({}));
    forget_scan_memos();
    EXPECT_TRUE(with && without);
    return {with ? with->headers.vector() : std::vector<HeaderDependency>{},
            without ? without->headers.vector() : std::vector<HeaderDependency>{}};
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
  EXPECT_TRUE(fs::exists(m_tmp.path() / "memo" / "listings.2"));
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
  test::write_file(listing_file(m_tmp.path() / "memo", stale.stamp.dev, stale.stamp.ino),
                   serialize_directory_listing(stale));
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
  EXPECT_TRUE(fs::exists(m_tmp.path() / "user" / "kcache-toolkit" / "listings.2")) << "kept per user";
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
