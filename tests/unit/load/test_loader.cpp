// The loader without a GPU: clear errors with no driver or a stub driver, and
// a program compiled in one run is served in the next without the compiler.
#include "support/child.hpp"
#include "kcache/loader.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "kcache/cache.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"

using kcache::ErrorCode;
using kcache::Loader;

TEST(Loader, NoDriverLibraryIsAClearToolkitMissingError) {
  kcache::LoaderOptions o;
  o.libcuda = "/nonexistent/libcuda.so.1";
  auto l = Loader::open(o);
  ASSERT_FALSE(l.has_value());
  EXPECT_EQ(l.error().code, ErrorCode::toolkit_missing);
  EXPECT_NE(l.error().message.find("needs an NVIDIA driver and GPU"), std::string::npos) << l.error().message;
}

TEST(Loader, StubDriverIsUnsupportedNotACrash) {
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (::access(stub, R_OK) != 0) {
    GTEST_SKIP() << "no CUDA stub driver at " << stub;
  }
  kcache::LoaderOptions o;
  o.libcuda = stub;
  auto l = Loader::open(o);
  ASSERT_FALSE(l.has_value());
  EXPECT_EQ(l.error().code, ErrorCode::unsupported);
  EXPECT_NE(l.error().message.find("stub"), std::string::npos) << l.error().message;
}

TEST(Loader, DefaultDriverEitherOpensOrSaysWhy) {
  auto l = Loader::open();
  if (l) {
    EXPECT_GT((*l)->device().cc_major, 0);
    EXPECT_GT((*l)->device().driver_version, 0);
  } else {
    EXPECT_TRUE(l.error().code == ErrorCode::toolkit_missing || l.error().code == ErrorCode::unsupported)
        << l.error().describe();
  }
}

// Run 1 compiles into a FileStore; run 2 (another process) gets the artifact
// without compiling and without even loading the toolkit, and it passes every
// check a load makes.
TEST(Loader, CompiledInOneRunIsServedInTheNextWithoutTheCompiler) {
  KCACHE_REQUIRE_NVRTC();
  kcache::test::TempDir dir;
  const auto request = kcache::test::kernel_request("twice", 3, "cubin", "sm_80");
  auto run = [&](int fd) {
    kcache::Toolkit::instance().set_memo_dir(dir.path() / "memo");
    const auto loads_before = kcache::Toolkit::instance().load_count();
    kcache::FileStoreOptions fo;
    fo.root = dir.path();
    auto store = kcache::FileStore::open(fo);
    if (!store) {
      ::_exit(10);
    }
    kcache::CacheOptions co;
    co.lock_dir = dir.path() / "v1" / "locks";
    kcache::Cache cache(**store, co);
    auto a = cache.get_or_compile(request);
    if (!a) {
      ::_exit(11);
    }
    const bool loadable = kcache::check_loadable(*a, kcache::DeviceInfo{0, 8, 0, 13000, "sm_80 device"}).has_value();
    const std::string line = std::to_string(cache.stats().compiles) + " " +
                             std::to_string(kcache::Toolkit::instance().load_count() - loads_before) + " " +
                             (loadable ? "1" : "0") + "\n";
    (void)!::write(fd, line.data(), line.size());
    ::_exit(0);
  };
  std::vector<std::string> lines;
  for (int i = 0; i < 2; ++i) {
    const auto child = kcache::test::run_reporting_child(run);
    ASSERT_TRUE(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) << kcache::test::describe_status(child.status);
    lines.push_back(child.output);
  }
  EXPECT_EQ(lines[0].substr(0, 2), "1 ");  // run 1 compiled once
  EXPECT_EQ(lines[1], "0 0 1\n");          // run 2: no compile, no toolkit load, loadable
}
