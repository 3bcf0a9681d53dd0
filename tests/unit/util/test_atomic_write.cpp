// util::write_file_atomically: the file is replaced in one step, in both
// durability modes, and nothing is left beside it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "util/atomic_write.hpp"

namespace kcache::util {
namespace {

namespace fs = std::filesystem;

// Every name in `dir` (temporary files are dot files).
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class AtomicWrite : public ::testing::TestWithParam<FileSync> {
 protected:
  test::TempDir m_dir;
};

TEST_P(AtomicWrite, CreatesAFileThatDidNotExist) {
  const fs::path f = m_dir.path() / "out.bin";
  ASSERT_TRUE(write_file_atomically(f, "new bytes", 0666, GetParam()));
  EXPECT_EQ(test::read_file(f), "new bytes");
  EXPECT_EQ(names_in(m_dir.path()), std::vector<std::string>{"out.bin"});
}

TEST_P(AtomicWrite, ReplacesAnExistingFileAndLeavesNoTemporary) {
  const fs::path f = m_dir.path() / "out.bin";
  test::write_file(f, std::string(200000, 'o'));
  ASSERT_TRUE(write_file_atomically(f, "replacement", 0640, GetParam()));
  EXPECT_EQ(test::read_file(f), "replacement");
  EXPECT_EQ(names_in(m_dir.path()), std::vector<std::string>{"out.bin"});
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777 & ~0640u, 0u);  // the new file's mode, not the old one's
}

TEST_P(AtomicWrite, AReaderHoldingTheOldFileKeepsTheOldBytes) {
  const fs::path f = m_dir.path() / "out.bin";
  test::write_file(f, "old");
  std::ifstream held(f, std::ios::binary);
  ASSERT_TRUE(write_file_atomically(f, "new", 0666, GetParam()));
  std::string seen;
  std::getline(held, seen);
  EXPECT_EQ(seen, "old");
  EXPECT_EQ(test::read_file(f), "new");
}

TEST_P(AtomicWrite, ASymlinkIsReplacedNotFollowed) {
  const fs::path target = m_dir.path() / "target.bin";
  const fs::path link = m_dir.path() / "out.bin";
  test::write_file(target, "target");
  fs::create_symlink(target, link);
  ASSERT_TRUE(write_file_atomically(link, "new", 0666, GetParam()));
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_EQ(test::read_file(link), "new");
  EXPECT_EQ(test::read_file(target), "target");
}

TEST_P(AtomicWrite, ADirectoryInTheWayIsAnErrorAndStaysADirectory) {
  const fs::path d = m_dir.path() / "out.bin";
  fs::create_directory(d);
  test::write_file(d / "inside", "kept");
  auto r = write_file_atomically(d, "new", 0666, GetParam());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("out.bin"), std::string::npos) << r.error().message;
  EXPECT_TRUE(fs::is_directory(d));
  EXPECT_EQ(test::read_file(d / "inside"), "kept");
  EXPECT_EQ(names_in(m_dir.path()), std::vector<std::string>{"out.bin"});
}

TEST_P(AtomicWrite, AMissingDirectoryIsAnErrorNamingThePath) {
  auto r = write_file_atomically(m_dir.path() / "no" / "out.bin", "x", 0666, GetParam());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("out.bin"), std::string::npos) << r.error().message;
}

// write_output_file: an output that already holds the bytes is only touched.
class OutputFile : public ::testing::Test {
 protected:
  // Sets `f`'s modification time to 2001-09-09 (long before now).
  static void make_old(const fs::path& f) {
    const struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
  }
  static struct stat stat_of(const fs::path& f) {
    struct stat st {};
    EXPECT_EQ(::lstat(f.c_str(), &st), 0);
    return st;
  }
  test::TempDir m_dir;
};

TEST_F(OutputFile, IdenticalBytesAreNotRewrittenButTheFileLooksNew) {
  const fs::path f = m_dir.path() / "k.cubin";
  test::write_file(f, std::string(150000, 'c'));
  make_old(f);
  const auto before = stat_of(f);
  auto r = write_output_file(f, std::string(150000, 'c'));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_FALSE(*r);
  const auto after = stat_of(f);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, not a copy
  EXPECT_GT(after.st_mtim.tv_sec, before.st_mtim.tv_sec + 1000);  // a build tool sees it as new
}

TEST_F(OutputFile, OtherBytesOfTheSameSizeAreWritten) {
  const fs::path f = m_dir.path() / "k.cubin";
  test::write_file(f, "aaaa");
  auto r = write_output_file(f, "aaab");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(*r);
  EXPECT_EQ(test::read_file(f), "aaab");
  EXPECT_EQ(names_in(m_dir.path()), std::vector<std::string>{"k.cubin"});
}

TEST_F(OutputFile, AnotherSizeIsWrittenAndAMissingFileCreated) {
  const fs::path f = m_dir.path() / "k.cubin";
  test::write_file(f, "short");
  ASSERT_TRUE(write_output_file(f, "longer bytes").value());
  EXPECT_EQ(test::read_file(f), "longer bytes");
  const fs::path g = m_dir.path() / "new.cubin";
  ASSERT_TRUE(write_output_file(g, "").value());
  EXPECT_TRUE(fs::is_regular_file(g));
  EXPECT_FALSE(write_output_file(g, "").value());  // empty and empty: the same
}

// A symlink is followed, as compilers do (docs/cli.md, "Output files"): the
// link stays a link and its target gets the bytes, in place.
TEST_F(OutputFile, ASymlinkIsFollowedAndItsTargetWrittenInPlace) {
  const fs::path target = m_dir.path() / "target.cubin";
  const fs::path link = m_dir.path() / "k.cubin";
  test::write_file(target, "old and longer");
  fs::create_symlink(target, link);
  ASSERT_TRUE(write_output_file(link, "new").value());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(test::read_file(target), "new");
}

TEST_F(OutputFile, ACharacterDeviceIsWrittenInPlaceNeverReplaced) {
  const fs::path null = m_dir.path() / "null";
  ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << "needs root (CAP_MKNOD)";
  ASSERT_TRUE(write_output_file(null, "bytes").value());
  EXPECT_TRUE(fs::is_character_file(null));
  const fs::path full = m_dir.path() / "full";
  ASSERT_EQ(::mknod(full.c_str(), S_IFCHR | 0666, ::makedev(1, 7)), 0);
  const auto r = write_output_file(full, "bytes");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::no_space);
  EXPECT_NE(r.error().message.find(full.string()), std::string::npos) << r.error().message;
  EXPECT_TRUE(fs::is_character_file(full));
}

INSTANTIATE_TEST_SUITE_P(Modes, AtomicWrite, ::testing::Values(FileSync::fsync, FileSync::none),
                         [](const auto& p) { return p.param == FileSync::fsync ? "fsync" : "none"; });

}  // namespace
}  // namespace kcache::util
