// The toolkit-header fingerprint (Toolkit::headers_fingerprint) on a toolkit
// laid out in a temporary directory: every change to what it covers changes
// it, also when a new process finds the memo files of an earlier one.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

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
    Toolkit::instance().set_memo_file(m_dir.path() / "memo" / "toolkit-memo");
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

  // Sleeps past the racy window (2 s) of the toolkit files just written, so
  // their identities may be remembered.
  static void age_past_racy_window() { std::this_thread::sleep_for(std::chrono::milliseconds(2100)); }

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

TEST_F(ToolkitFingerprint, ADamagedMemoIsIgnored) {
  const std::string a = fingerprint();
  // A listing cut short after its first input, under every digest a test
  // could think of: the whole memo is ignored, whatever it says.
  test::write_file(m_dir.path() / "memo" / "toolkit-memo",
                   "kcache-toolkit-memo 2\nfingerprint " + std::string(32, '0') + " " + std::string(64, 'f') +
                       "\nlisting " + std::string(32, '0') + " 5\ni /nonexistent\n");
  EXPECT_EQ(fingerprint(), a);
}

TEST_F(ToolkitFingerprint, TheRememberedFingerprintIsUsedOnlyWhileItsInputsKeepTheirIdentity) {
  // Inputs changed less than 2 s ago are racy and name no memo record.
  const std::string racy = fingerprint();
  EXPECT_FALSE(fs::exists(m_dir.path() / "memo" / "toolkit-memo"));
  age_past_racy_window();
  const std::string a = fingerprint();
  EXPECT_EQ(a, racy);
  const fs::path memo = m_dir.path() / "memo" / "toolkit-memo";
  std::string text = test::read_file(memo);
  const auto at = text.find("fingerprint ");
  ASSERT_NE(at, std::string::npos) << text;
  // The remembered value is used while its inputs keep their identity...
  text.replace(at + 12 + 33, 64, std::string(64, 'f'));
  test::write_file(memo, text);
  EXPECT_EQ(fingerprint(), std::string(64, 'f'));
  // ...and never after one of them changed.
  test::write_file(m_home / "dist-info" / "nvidia_cuda_crt-13.0.88.dist-info" / "RECORD",
                   "include/crt/host_defines.h,sha256=EEEE,100\n");
  const std::string b = fingerprint();
  EXPECT_NE(b, std::string(64, 'f'));
  EXPECT_NE(b, a);
}

}  // namespace
}  // namespace kcache
