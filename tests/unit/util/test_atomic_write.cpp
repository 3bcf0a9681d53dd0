// util::write_file_atomically: the file is replaced in one step, in both
// durability modes, and nothing is left beside it.
#include <gtest/gtest.h>
#include <sys/stat.h>

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

INSTANTIATE_TEST_SUITE_P(Modes, AtomicWrite, ::testing::Values(FileSync::fsync, FileSync::none),
                         [](const auto& p) { return p.param == FileSync::fsync ? "fsync" : "none"; });

}  // namespace
}  // namespace kcache::util
