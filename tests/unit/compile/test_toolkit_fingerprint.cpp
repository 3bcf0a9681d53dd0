// The toolkit-header fingerprint (Toolkit::headers_fingerprint) on a toolkit
// laid out in a temporary directory: every change to what it covers changes
// it, also when a new process finds the memo files of an earlier one.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "kcache/toolkit.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

class ToolkitFingerprint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("KCACHE_CUDA_HOME")) {
      m_old_home = old;
    }
    m_home = m_dir.path() / "cuda";
    fs::create_directories(m_home / "lib64");
    fs::create_directories(m_home / "dist-info" / "nvidia_cuda_crt-13.0.88.dist-info");
    test::write_file(m_home / "lib64" / "libnvrtc.so.13", "not really a library");
    test::write_file(m_home / "lib64" / "libnvrtc-builtins.so.13.0", "builtins 13.0");
    test::write_file(m_home / "dist-info" / "nvidia_cuda_crt-13.0.88.dist-info" / "RECORD",
                     "include/crt/host_defines.h,sha256=AAAA,100\n");
    ::setenv("KCACHE_CUDA_HOME", m_home.c_str(), 1);
    Toolkit::instance().set_memo_dir(m_dir.path() / "memo");
  }
  void TearDown() override {
    if (m_old_home) {
      ::setenv("KCACHE_CUDA_HOME", m_old_home->c_str(), 1);
    } else {
      ::unsetenv("KCACHE_CUDA_HOME");
    }
    Toolkit::instance().set_memo_dir({});
    Toolkit::instance().reset_discovery();
  }

  // The fingerprint as a new process would compute it: nothing remembered in
  // memory, the memo files of earlier calls on disk.
  std::string fingerprint() {
    Toolkit::instance().reset_discovery();
    auto fp = Toolkit::instance().headers_fingerprint();
    EXPECT_TRUE(fp) << fp.error().describe();
    return fp ? *fp : std::string();
  }

  test::TempDir m_dir;
  fs::path m_home;
  std::optional<std::string> m_old_home;
};

TEST_F(ToolkitFingerprint, StableWhileNothingChangesAndMemoised) {
  const std::string a = fingerprint();
  ASSERT_EQ(a.size(), 64u);
  EXPECT_EQ(fingerprint(), a);
  EXPECT_FALSE(fs::is_empty(m_dir.path() / "memo"));
  EXPECT_EQ(fingerprint(), a);  // now read from the memo files
}

TEST_F(ToolkitFingerprint, AnEditedManifestChangesIt) {
  const std::string a = fingerprint();
  test::write_file(m_home / "dist-info" / "nvidia_cuda_crt-13.0.88.dist-info" / "RECORD",
                   "include/crt/host_defines.h,sha256=BBBB,100\n");
  EXPECT_NE(fingerprint(), a);
}

TEST_F(ToolkitFingerprint, ANewPackageChangesItEvenWhenItsDirectoryKeepsItsMtime) {
  const std::string a = fingerprint();
  const fs::path dist = m_home / "dist-info";
  struct stat before {};
  ASSERT_EQ(::stat(dist.c_str(), &before), 0);
  fs::create_directories(dist / "nvidia_cuda_cccl-13.0.85.dist-info");
  test::write_file(dist / "nvidia_cuda_cccl-13.0.85.dist-info" / "RECORD", "include/cub/cub.cuh,sha256=CCCC,10\n");
  // Put the listing directory's mtime back, as a copy that keeps times would:
  // its ctime still moves, and the listing memo must not be trusted.
  struct utimbuf times {before.st_atime, before.st_mtime};
  ASSERT_EQ(::utime(dist.c_str(), &times), 0);
  EXPECT_NE(fingerprint(), a);
}

TEST_F(ToolkitFingerprint, ARemovedPackageChangesIt) {
  fs::create_directories(m_home / "dist-info" / "extra.dist-info");
  test::write_file(m_home / "dist-info" / "extra.dist-info" / "RECORD", "x,sha256=DDDD,1\n");
  const std::string a = fingerprint();
  fs::remove_all(m_home / "dist-info" / "extra.dist-info");
  EXPECT_NE(fingerprint(), a);
}

TEST_F(ToolkitFingerprint, NewNvrtcBuiltinsChangeIt) {
  const std::string a = fingerprint();
  test::write_file(m_home / "lib64" / "libnvrtc-builtins.so.13.1", "builtins 13.1");
  const std::string b = fingerprint();
  EXPECT_NE(b, a);
  test::write_file(m_home / "lib64" / "libnvrtc-builtins.so.13.1", "builtins 13.1, rebuilt");
  EXPECT_NE(fingerprint(), b);
}

TEST_F(ToolkitFingerprint, ADamagedListingMemoIsIgnored) {
  const std::string a = fingerprint();
  for (const auto& e : fs::directory_iterator(m_dir.path() / "memo")) {
    if (e.path().filename().string().rfind("listing-", 0) == 0) {
      test::write_file(e.path(), "kcache-toolkit-memo 1\ni /nonexistent\n");  // no "end": cut short
    }
  }
  EXPECT_EQ(fingerprint(), a);
}

}  // namespace
}  // namespace kcache
