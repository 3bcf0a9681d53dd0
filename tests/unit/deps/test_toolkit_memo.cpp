// The toolkit memo (deps/toolkit_memo.hpp): its grammar, its bounds, and
// that Toolkit::identify() trusts a remembered build-id only while the
// library file keeps its stat identity, whichever cache directory asks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "compile/elf_file.hpp"
#include "deps/toolkit_memo.hpp"
#include "kcache/toolkit.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;
using jit::ToolkitMemo;

constexpr std::int64_t k_long_after = std::int64_t{4'000'000'000} * 1'000'000'000;  // year 2096: nothing is racy

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

TEST(ToolkitMemo, EveryRecordKindRoundTrips) {
  test::TempDir dir;
  const fs::path lib = dir.path() / "libnvrtc.so.13";
  test::write_file(lib, "x");
  ToolkitMemo m;
  m.set_build_id("nvrtc", lib, stat_of(lib), "65be0db342ad51a06876e71e210bccc5aa8322cf", k_long_after);
  m.set_version("nvrtc", "65be0db342ad51a06876e71e210bccc5aa8322cf", "13.0");
  m.set_version("nvvm", "sha256:" + std::string(64, 'a'), "2.0/ir2.0/dbg3.2");
  m.set_listing(std::string(32, 'b'), {{"/cuda/version.json", "/cuda/dist-info/a b.dist-info/RECORD"},
                                       {"/cuda/lib64/libnvrtc-builtins.so.13.0"}});
  m.set_fingerprint(std::string(32, 'c'), std::string(64, 'd'));
  ASSERT_TRUE(m.changed());
  const auto back = ToolkitMemo::parse(m.serialize());
  ASSERT_TRUE(back) << m.serialize();
  EXPECT_EQ(back->serialize(), m.serialize());
  EXPECT_EQ(back->build_id("nvrtc", lib, stat_of(lib)), "65be0db342ad51a06876e71e210bccc5aa8322cf");
  EXPECT_EQ(back->version("nvvm", "sha256:" + std::string(64, 'a')), "2.0/ir2.0/dbg3.2");
  EXPECT_EQ(back->version("nvjitlink", "65be0db342ad51a06876e71e210bccc5aa8322cf"), std::nullopt);
  const auto listing = back->listing(std::string(32, 'b'));
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->inputs.size(), 2U);
  EXPECT_EQ(listing->inputs[1], "/cuda/dist-info/a b.dist-info/RECORD");
  EXPECT_EQ(listing->builtins, std::vector<fs::path>{"/cuda/lib64/libnvrtc-builtins.so.13.0"});
  EXPECT_EQ(back->fingerprint(std::string(32, 'c')), std::string(64, 'd'));
  EXPECT_FALSE(back->changed());
}

TEST(ToolkitMemo, AnyDeviationIgnoresTheWholeFile) {
  const std::string good = "kcache-toolkit-memo 2\nversion nvrtc abc 13.0\nend\n";
  ASSERT_TRUE(ToolkitMemo::parse(good));
  for (const std::string& bad : {
           std::string("kcache-toolkit-memo 1\nversion nvrtc abc 13.0\nend\n"),  // another format version
           std::string("kcache-toolkit-memo 2\nversion nvrtc abc 13.0\n"),        // cut short
           std::string("kcache-toolkit-memo 2\nversion nvrtc abc 13.0\nend\nx"),  // trailing bytes
           std::string("kcache-toolkit-memo 2\nversion cudart abc 13.0\nend\n"),  // unknown library
           std::string("kcache-toolkit-memo 2\nversion nvrtc ABC 13.0\nend\n"),   // not a build-id
           std::string("kcache-toolkit-memo 2\nversion nvrtc abc 13 0\nend\n"),   // not a version
           std::string("kcache-toolkit-memo 2\nfingerprint ") + std::string(32, 'a') + " " + std::string(63, 'b') +
               "\nend\n",
           std::string("kcache-toolkit-memo 2\nlisting ") + std::string(32, 'a') + " 2\ni /a\nend\n",
           std::string("kcache-toolkit-memo 2\nlisting ") + std::string(32, 'a') + " 1\ni relative\nend\n",
           std::string("kcache-toolkit-memo 2\nlibrary nvrtc 1 2 3 4 abc /lib\nend\n"),  // a number missing
           std::string("kcache-toolkit-memo 2\nlibrary nvrtc 1 2 3 4 5 abc lib\nend\n"),  // relative path
           std::string("kcache-toolkit-memo 2\nsomething else\nend\n"),
       }) {
    EXPECT_FALSE(ToolkitMemo::parse(bad)) << bad;
  }
  test::TempDir dir;
  test::write_file(dir.path() / "memo", "kcache-toolkit-memo 2\nversion nvrtc abc 13.0\n");
  EXPECT_EQ(ToolkitMemo::load(dir.path() / "memo").version("nvrtc", "abc"), std::nullopt);
}

TEST(ToolkitMemo, KeepsTheNewestRecordsOfEachKind) {
  ToolkitMemo m;
  for (int i = 0; i < 40; ++i) {
    m.set_version("nvrtc", "id" + std::to_string(i), "13." + std::to_string(i));
  }
  m.set_fingerprint(std::string(32, 'a'), std::string(64, 'b'));
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(m.version("nvrtc", "id" + std::to_string(i)).has_value(), i >= 40 - static_cast<int>(ToolkitMemo::k_max_records))
        << i;
  }
  EXPECT_EQ(m.fingerprint(std::string(32, 'a')), std::string(64, 'b'));
}

TEST(ToolkitMemo, ARacyLibraryIdentityIsNotRemembered) {
  test::TempDir dir;
  const fs::path lib = dir.path() / "libnvrtc.so.13";
  test::write_file(lib, "x");
  const struct stat st = stat_of(lib);
  const std::int64_t written = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  ToolkitMemo m;
  m.set_build_id("nvrtc", lib, st, "abc", written + 1'000'000'000);  // 1 s later: a second write could keep it
  EXPECT_FALSE(m.changed());
  EXPECT_EQ(m.build_id("nvrtc", lib, st), std::nullopt);
  m.set_build_id("nvrtc", lib, st, "abc", written + 3'000'000'000);
  EXPECT_EQ(m.build_id("nvrtc", lib, st), "abc");
}

TEST(ToolkitMemo, SaveKeepsWhatAnotherProcessAdded) {
  test::TempDir dir;
  const fs::path file = dir.path() / "sub" / "memo";
  ToolkitMemo a = ToolkitMemo::load(file);
  ToolkitMemo b = ToolkitMemo::load(file);
  a.set_version("nvrtc", "aaa", "13.0");
  b.set_version("nvjitlink", "bbb", "13.1");
  a.save(file);
  b.save(file);
  const ToolkitMemo both = ToolkitMemo::load(file);
  EXPECT_EQ(both.version("nvrtc", "aaa"), "13.0");
  EXPECT_EQ(both.version("nvjitlink", "bbb"), "13.1");
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

// A toolkit home whose "libnvrtc" is a copy of a small ELF file with a GNU
// build-id (/bin/true): identify() reads its build-id, and the version comes
// from the memo (the file is no library, so a load would fail).
class ToolkitIdentityMemo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("KCACHE_CUDA_HOME")) {
      m_old_home = old;
    }
    fs::create_directories(m_dir.path() / "cuda" / "lib64");
    fs::copy_file("/bin/true", lib());
    ::setenv("KCACHE_CUDA_HOME", (m_dir.path() / "cuda").c_str(), 1);
    Toolkit::instance().set_memo_dir(m_dir.path() / "cache-a" / "v1" / "toolkit");
    Toolkit::instance().set_memo_file(memo_file());
    Toolkit::instance().reset_discovery();
  }
  void TearDown() override {
    if (m_old_home) {
      ::setenv("KCACHE_CUDA_HOME", m_old_home->c_str(), 1);
    } else {
      ::unsetenv("KCACHE_CUDA_HOME");
    }
    Toolkit::instance().set_memo_dir({});
    Toolkit::instance().set_memo_file(std::nullopt);
    Toolkit::instance().reset_discovery();
  }
  fs::path lib() const { return m_dir.path() / "cuda" / "lib64" / "libnvrtc.so.13"; }
  fs::path memo_file() const { return m_dir.path() / "user" / "kcache-toolkit" / "memo"; }

  // identify() as a new process with the cache directory `cache` would call it.
  Result<LibraryIdentity> identify_in(const std::string& cache) {
    Toolkit::instance().set_memo_dir(m_dir.path() / cache / "v1" / "toolkit");
    Toolkit::instance().reset_discovery();
    return Toolkit::instance().identify(ToolkitLibrary::nvrtc);
  }

  test::TempDir m_dir;
  std::optional<std::string> m_old_home;
};

TEST_F(ToolkitIdentityMemo, ARememberedVersionServesEveryCacheDirectoryOfTheUser) {
  const auto build_id = jit::read_build_id(lib());
  ASSERT_TRUE(build_id && *build_id) << "/bin/true has no GNU build-id";
  ToolkitMemo seed;
  seed.set_version("nvrtc", **build_id, "13.7");
  seed.save(memo_file());
  const auto loads = Toolkit::instance().load_count();
  for (const std::string& cache : {std::string("cache-a"), std::string("cache-b")}) {
    auto id = identify_in(cache);
    ASSERT_TRUE(id) << id.error().describe();
    EXPECT_EQ(id->build_id, **build_id);
    EXPECT_EQ(id->version, "13.7");
    EXPECT_TRUE(id->version_from_memo);
    EXPECT_FALSE(fs::exists(m_dir.path() / cache)) << "nothing of the toolkit's is written in a cache directory";
  }
  EXPECT_EQ(Toolkit::instance().load_count(), loads) << "no library was loaded";
}

TEST_F(ToolkitIdentityMemo, ARememberedBuildIdIsTrustedOnlyWhileTheFileKeepsItsIdentity) {
  const auto build_id = jit::read_build_id(lib());
  ASSERT_TRUE(build_id && *build_id);
  ToolkitMemo seed;
  // A build-id remembered for this very identity is used without reading the file...
  seed.set_build_id("nvrtc", lib(), stat_of(lib()), "feedface", k_long_after);
  seed.set_version("nvrtc", "feedface", "99.9");
  seed.set_version("nvrtc", **build_id, "13.7");
  seed.save(memo_file());
  auto remembered = identify_in("cache-a");
  ASSERT_TRUE(remembered) << remembered.error().describe();
  EXPECT_EQ(remembered->build_id, "feedface");
  EXPECT_EQ(remembered->version, "99.9");
  // ...and never once the file was written again (same bytes, new mtime and
  // ctime), nor once another file took its place (a new inode).
  fs::copy_file("/bin/true", lib(), fs::copy_options::overwrite_existing);
  auto rewritten = identify_in("cache-a");
  ASSERT_TRUE(rewritten) << rewritten.error().describe();
  EXPECT_EQ(rewritten->build_id, **build_id);
  EXPECT_EQ(rewritten->version, "13.7");
  const fs::path other = lib().string() + ".new";
  fs::copy_file("/bin/true", other);
  fs::rename(other, lib());
  auto replaced = identify_in("cache-b");
  ASSERT_TRUE(replaced) << replaced.error().describe();
  EXPECT_EQ(replaced->build_id, **build_id);
  EXPECT_EQ(ToolkitMemo::load(memo_file()).build_id("nvrtc", lib(), stat_of(lib())), std::nullopt)
      << "a file written just now is racy: its identity is not remembered";
}

}  // namespace
}  // namespace kcache
