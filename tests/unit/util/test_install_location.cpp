// util/install_location: the files installed with the kcache command are
// found in both layouts it ships in, FHS (<prefix>/lib/kcache/) and the
// wheel (<prefix>/lib/python3.X/site-packages/kcache/).
#include "util/install_location.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

constexpr const char* k_relpath = "../lib/kcache/libkcache-interpose.so";

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

TEST(InstallLocation, FhsLayoutComesFirst) {
  kcache::test::TempDir dir;
  const fs::path prefix = dir.path() / "usr";
  touch(prefix / "lib/kcache/libkcache-interpose.so");
  touch(prefix / "lib/python3.11/site-packages/kcache/libkcache-interpose.so");
  fs::create_directories(prefix / "bin");
  EXPECT_EQ(kcache::util::installed_file(prefix / "bin", k_relpath), prefix / "lib/kcache/libkcache-interpose.so");
}

TEST(InstallLocation, WheelLayoutInAVenvAndASystemPrefix) {
  kcache::test::TempDir dir;
  // A venv: <venv>/bin/kcache, <venv>/lib/python3.12/site-packages/kcache/.
  const fs::path venv = dir.path() / "venv";
  fs::create_directories(venv / "bin");
  fs::create_directories(venv / "lib/python3.12/site-packages/other");
  touch(venv / "lib/python3.12/site-packages/kcache/libkcache-interpose.so");
  EXPECT_EQ(kcache::util::installed_file(venv / "bin", k_relpath),
            venv / "lib/python3.12/site-packages/kcache/libkcache-interpose.so");
  // Debian's system pip: /usr/local/bin, /usr/local/lib/python3.11/dist-packages;
  // an interpreter using lib64.
  const fs::path local = dir.path() / "local";
  fs::create_directories(local / "bin");
  touch(local / "lib64/python3.11/dist-packages/kcache/kcache_onnx.so");
  EXPECT_EQ(kcache::util::installed_file(local / "bin", "../lib/kcache/kcache_onnx.so"),
            local / "lib64/python3.11/dist-packages/kcache/kcache_onnx.so");
}

TEST(InstallLocation, MissingEverywhereNamesTheFhsPath) {
  kcache::test::TempDir dir;
  const fs::path prefix = dir.path() / "p";
  fs::create_directories(prefix / "bin");
  fs::create_directories(prefix / "lib/python3.11/site-packages/kcache");  // a kcache without the file
  touch(prefix / "lib/python3.11/site-packages/kcache/libkcache-interpose.so/inside");  // a directory, not a file
  EXPECT_EQ(kcache::util::installed_file(prefix / "bin", k_relpath), prefix / "lib/kcache/libkcache-interpose.so");
}

TEST(InstallLocation, SiteDirsAreListedInOrder) {
  kcache::test::TempDir dir;
  const fs::path prefix = dir.path() / "p";
  fs::create_directories(prefix / "lib/python3.12/site-packages");
  fs::create_directories(prefix / "lib/python3.11/site-packages");
  fs::create_directories(prefix / "lib/python3.11/dist-packages");
  fs::create_directories(prefix / "lib/perl5/site-packages");
  fs::create_directories(prefix / "lib64/python3/dist-packages");
  const std::vector<fs::path> want = {prefix / "lib/python3.11/site-packages", prefix / "lib/python3.11/dist-packages",
                                      prefix / "lib/python3.12/site-packages", prefix / "lib64/python3/dist-packages"};
  EXPECT_EQ(kcache::util::python_site_dirs(prefix), want);
  EXPECT_TRUE(kcache::util::python_site_dirs(fs::path()).empty());
}

TEST(InstallLocation, ThisObjectIsTheTestExecutable) {
  std::error_code ec;
  EXPECT_EQ(kcache::util::this_object_path(), fs::read_symlink("/proc/self/exe", ec));
}

}  // namespace
