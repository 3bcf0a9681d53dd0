// A real CMake CUDA project of 32 translation units (tests/nvcc_project)
// built with CMAKE_CUDA_COMPILER_LAUNCHER=kcache (docs/nvcc.md): four builds
// of the cold tree at once compile each unit once, a rebuild runs nvcc zero
// times with byte-identical objects and dependency files, a header edit
// rebuilds only the units that include it, and a second host with its own
// cache directory builds everything from a real redis-server, its entries
// signed with the team key (a host with another key compiles). One test, so
// the cold build (the costly part) happens once.
#include "integration/nvcc_shell.hpp"
#include "support/files.hpp"
#include "support/redis_server.hpp"

#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <string>

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t k_units = 32;

// Every object and dependency file under `build`, by path relative to it.
std::map<std::string, std::string> outputs(const fs::path& build) {
  std::map<std::string, std::string> out;
  const fs::path objects = build / "CMakeFiles" / "project_kernels.dir";
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(objects, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".o") || name.ends_with(".o.d"))) {
      out[fs::relative(e.path(), build).string()] = read_file(e.path());
    }
  }
  return out;
}

class NvccProject : public NvccShell {
 protected:
  void SetUp() override {
    NvccShell::SetUp();
    if (IsSkipped()) {
      return;
    }
    if (std::system("command -v cmake >/dev/null && command -v ninja >/dev/null") != 0) {
      GTEST_SKIP() << "cmake or ninja is not installed";
    }
    fs::copy(fs::path(KCACHE_SOURCE_DIR) / "tests" / "nvcc_project", dir() / "project",
             fs::copy_options::recursive);
    m_wrapper = make_counting_nvcc(root() / "cuda", nvcc());
  }

  // Configures build directory `name` with the launcher (KCACHE_DIR=`cache`
  // plus `env`), the counting nvcc as the CUDA compiler.
  ShellRun configure(const std::string& name) {
    return sh("cmake -S project -B " + name + " -G Ninja -DCMAKE_CUDA_COMPILER='" + m_wrapper +
              "' -DCMAKE_CUDA_COMPILER_LAUNCHER=\"$K\" >" + name + ".configure.log 2>&1 || { cat " +
              name + ".configure.log; exit 1; }");
  }

  // Builds `name`, keeping the dependency files ninja would delete after reading them.
  static std::string build(const std::string& name) {
    return "ninja -C " + name + " -d keepdepfile -j2 >" + name + ".build.log 2>&1 || { cat " +
           name + ".build.log; exit 1; }";
  }

  // A header edit in b1 (built above) rebuilds only the units that include it.
  void expect_an_edit_rebuilds_only_its_units() {
    const auto before = outputs(dir() / "b1");
    ShellRun r;
    // device_math.cuh is included by k01-k06 only.
    const fs::path header = dir() / "project/include/project/device_math.cuh";
    std::string text = read_file(header);
    text.replace(text.find("+ 0.5f"), 6, "+ 0.75f");
    write_file(header, text);
    r = sh(log_env() + "rm -f nvcc.log\n" + build("b1"));
    ASSERT_EQ(r.rc, 0) << r.out;
    const std::string log = read_file(dir() / "nvcc.log");
    EXPECT_EQ(nvcc_runs(), 6u) << log;
    for (int k = 1; k <= 6; ++k) {
      EXPECT_NE(log.find("src/k0" + std::to_string(k) + ".cu"), std::string::npos) << log;
    }
    const auto after = outputs(dir() / "b1");
    for (const auto& [path, bytes] : after) {
      const bool rebuilt = path.find("/k0") != std::string::npos &&
                           path[path.find("/k0") + 3] >= '1' && path[path.find("/k0") + 3] <= '6';
      if (!rebuilt) {
        EXPECT_EQ(bytes, before.at(path)) << path;
      } else if (path.ends_with(".o")) {
        EXPECT_NE(mask_temporary_names(bytes), mask_temporary_names(before.at(path))) << path;
      }
    }
    // The edit undone: the old objects come back from the cache, nvcc runs 0 times.
    text.replace(text.find("+ 0.75f"), 7, "+ 0.5f");
    write_file(header, text);
    r = sh(log_env() + "rm -f nvcc.log\n" + build("b1"));
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(nvcc_runs(), 0u) << read_file(dir() / "nvcc.log");
    EXPECT_EQ(outputs(dir() / "b1"), before);
  }

  std::size_t nvcc_runs() const { return count_lines(dir() / "nvcc.log"); }
  static std::string log_env() { return "export KCACHE_TEST_NVCC_LOG=$PWD/nvcc.log\n"; }

  std::string m_wrapper;
};

TEST_F(NvccProject,
       BuildsOnceRebuildsFromTheCacheSharesSignedThroughRedisAndRebuildsOnlyWhatAnEditTouches) {
  std::string why;
  auto redis = RedisServer::start(root() / "redis", &why);
  if (!redis) {
    GTEST_SKIP() << "redis-server: " << why;
  }
  // The team remote, uploads signed with the team key: a reader accepts only signed objects.
  ASSERT_EQ(sh("\"$K\" remote keygen team.key && \"$K\" remote keygen other.key").rc, 0);
  const std::string remote = "export KCACHE_REMOTE=" + redis->url() + " KCACHE_REMOTE_KEY_FILE=$PWD/team.key\n";
  for (const char* b : {"b1", "b2", "b3", "b4"}) {
    ASSERT_EQ(configure(b).rc, 0);
  }
  // Four builds of the cold tree at once: each unit is compiled once.
  auto r = sh(log_env() + remote + "rm -f nvcc.log\n" + "(" + build("b1") + ") & (" + build("b2") +
              ") & (" + build("b3") + ") & (" + build("b4") + ") & wait\n" +
              "for b in b1 b2 b3 b4; do grep -q 'no work to do\\|Building CUDA' $b.build.log || "
              "exit 1; done");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(nvcc_runs(), k_units) << read_file(dir() / "nvcc.log");
  const auto first = outputs(dir() / "b1");
  ASSERT_EQ(first.size(), 2 * k_units);
  for (const char* b : {"b2", "b3", "b4"}) {
    EXPECT_EQ(outputs(dir() / b), first) << b;
  }
  // A rebuild from clean: nvcc runs 0 times; objects and dependency files are byte-identical.
  r = sh(log_env() + remote + "rm -f nvcc.log; ninja -C b1 -t clean >/dev/null\n" + build("b1"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nvcc_runs(), 0u) << read_file(dir() / "nvcc.log");
  EXPECT_EQ(outputs(dir() / "b1"), first);
  // A second host: its own cache directory, the same team remote: nvcc runs 0 times.
  r = sh(log_env() + remote + "export KCACHE_DIR=$PWD/../host2-cache; rm -f nvcc.log\n");
  ASSERT_EQ(configure("h2").rc, 0);
  r = sh(log_env() + remote + "export KCACHE_DIR=$PWD/../host2-cache; rm -f nvcc.log\n" +
         build("h2"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nvcc_runs(), 0u) << read_file(dir() / "nvcc.log");
  EXPECT_EQ(outputs(dir() / "h2"), first);
  const auto stats = sh("KCACHE_DIR=$PWD/../host2-cache \"$K\" stats --json");
  EXPECT_NE(stats.out.find("\"hits\": 32"), std::string::npos) << stats.out;
  // A host that holds another key (not the team's) trusts none of the team's entries: it compiles.
  r = sh(log_env() + remote + "export KCACHE_DIR=$PWD/../host3-cache KCACHE_REMOTE_KEY_FILE=$PWD/other.key\n" +
         "rm -f nvcc.log; ninja -C h2 -t clean >/dev/null\n" +
         "ninja -C h2 CMakeFiles/project_kernels.dir/src/k01.cu.o >h3.build.log 2>&1 || { cat h3.build.log; exit 1; }");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nvcc_runs(), 1u) << read_file(dir() / "nvcc.log");
  expect_an_edit_rebuilds_only_its_units();
}

}  // namespace
}  // namespace kcache::test
