// Installs kcache into a temporary prefix and builds a consumer against it,
// once with find_package(kcache) and once with pkg-config, then runs both.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

// The consumer project the Debian package's test builds too.
const fs::path k_consumer_dir = fs::path(KCACHE_SOURCE_DIR) / "tests" / "packaging" / "consumer";

int sh(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

TEST(InstalledPackage, FindPackageAndPkgConfigConsumersBuildAndRun) {
  kcache::test::TempDir dir;
  const fs::path build = fs::path(KCACHE_CLI_PATH).parent_path().parent_path();
  {
    // A sanitizer build's static library needs the sanitizer runtime in every
    // consumer; the package is meant for plain builds.
    std::ifstream cache(build / "CMakeCache.txt");
    std::string line;
    while (std::getline(cache, line)) {
      if (line.rfind("KCACHE_SANITIZE:", 0) != 0) {
        continue;
      }
      const std::string value = line.substr(line.find('=') + 1);
      if (!value.empty() && value != "OFF" && value != "FALSE" && value != "0" && value != "NO") {
        GTEST_SKIP() << "sanitizer build (" << line << "): the installed package is tested in plain builds";
      }
    }
  }
  const fs::path prefix = dir.path() / "prefix";
  const std::string log = (dir.path() / "log.txt").string();
  auto show_log = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ASSERT_EQ(sh("cmake --install '" + build.string() + "' --prefix '" + prefix.string() + "' >'" + log + "' 2>&1"), 0)
      << show_log();
  ASSERT_TRUE(fs::exists(prefix / "include" / "kcache" / "store.hpp"));
  ASSERT_TRUE(fs::exists(prefix / "bin" / "kcache"));

  // The installed command finds its ONNX module in <libdir>/kcache/: a file
  // that is no ONNX model is reported as such, not as "ONNX support is not available".
  spit(dir.path() / "bad.onnx", "not a protobuf message");
  const std::string inspect_log = (dir.path() / "inspect.txt").string();
  EXPECT_EQ(sh("cd '" + dir.path().string() + "' && env -u KCACHE_ONNX_MODULE KCACHE_DIR='" +
               (dir.path() / "cache").string() + "' '" + (prefix / "bin" / "kcache").string() +
               "' inspect bad.onnx --json >'" + inspect_log + "' 2>&1"),
            4);
  {
    std::ifstream in(inspect_log);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("is not an ONNX model"), std::string::npos) << text;
    EXPECT_EQ(text.find("not available"), std::string::npos) << text;
  }

  // ... and its stand-in library there too (util/install_location.hpp).
  const std::string env_log = (dir.path() / "print-env.txt").string();
  EXPECT_EQ(sh("env -u KCACHE_INTERPOSE_LIBRARY '" + (prefix / "bin" / "kcache").string() + "' run --print-env >'" +
               env_log + "' 2>&1"),
            0);
  {
    std::ifstream in(env_log);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    fs::path stand_in;
    for (const auto& e : fs::recursive_directory_iterator(prefix)) {
      if (e.path().filename() == "libkcache-interpose.so") {
        stand_in = e.path();
      }
    }
    ASSERT_FALSE(stand_in.empty()) << "no stand-in installed";
    EXPECT_NE(text.find("LD_PRELOAD='" + stand_in.lexically_normal().string() + "'"), std::string::npos) << text;
  }

  // CMake consumer.
  const fs::path src = k_consumer_dir;
  const fs::path out = dir.path() / "consumer-build";
  ASSERT_EQ(sh("cmake -S '" + src.string() + "' -B '" + out.string() + "' -G Ninja -DCMAKE_BUILD_TYPE=Release "
               "-DCMAKE_PREFIX_PATH='" + prefix.string() + "' >>'" + log + "' 2>&1"),
            0)
      << show_log();
  ASSERT_EQ(sh("cmake --build '" + out.string() + "' >>'" + log + "' 2>&1"), 0) << show_log();
  ASSERT_EQ(sh("'" + (out / "consumer").string() + "' >>'" + log + "' 2>&1"), 0) << show_log();

  // pkg-config consumer (static library: --static brings in Requires.private).
  fs::path pc_dir;
  for (const auto& e : fs::recursive_directory_iterator(prefix)) {
    if (e.path().filename() == "kcache.pc") {
      pc_dir = e.path().parent_path();
    }
  }
  ASSERT_FALSE(pc_dir.empty()) << "no kcache.pc installed";
  const std::string pc = "PKG_CONFIG_PATH='" + pc_dir.string() + "' pkg-config";
  ASSERT_EQ(sh(pc + " --exists kcache"), 0);
  ASSERT_EQ(sh("c++ -std=c++20 -O1 '" + (src / "main.cpp").string() + "' -o '" + (dir.path() / "pc-consumer").string() +
               "' $(" + pc + " --cflags --libs --static kcache) >>'" + log + "' 2>&1"),
            0)
      << show_log();
  ASSERT_EQ(sh("'" + (dir.path() / "pc-consumer").string() + "' >>'" + log + "' 2>&1"), 0) << show_log();
  EXPECT_NE(show_log().find("consumer ok"), std::string::npos);
}
