// GPU tests: real loads and kernel launches with checked results. Each test
// skips with a clear message when there is no driver or no device. Run with
// `build/ci/tests/gpu/test_gpu` or `ctest --preset ci -L gpu`.
#include "support/child.hpp"
#include "kcache/loader.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kcache/cache.hpp"
#include "kcache/file_store.hpp"
#include "kcache/toolkit.hpp"
#include "support/temp_dir.hpp"
#include "unit/worker/worker_test_support.hpp"

using kcache::ErrorCode;
using kcache::Loader;

namespace {

std::unique_ptr<Loader> open_or_skip_reason(std::string& why) {
  auto l = Loader::open();
  if (!l) {
    why = l.error().describe();
    return nullptr;
  }
  return std::move(*l);
}

#define KCACHE_REQUIRE_GPU(loader)                                                    \
  std::string why_gpu_;                                                               \
  auto loader = open_or_skip_reason(why_gpu_);                                        \
  if (!loader) {                                                                      \
    GTEST_SKIP() << "no usable CUDA driver/GPU on this machine: " << why_gpu_;        \
  }

std::string device_arch(const Loader& l) {
  return "sm_" + std::to_string(l.device().cc_major * 10 + l.device().cc_minor);
}

kcache::CompileRequest template_request(const std::string& target, const std::string& arch) {
  kcache::CompileRequest r;
  r.backend = "nvrtc";
  r.name = "axpy.cu";
  r.source =
      "template <typename T> __global__ void axpy(T* y, const T* x, T a, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = a * x[i] + y[i];\n"
      "}\n";
  r.target_kind = target;
  r.options = {"-arch=" + arch};
  r.name_expressions = {"axpy<int>", "axpy<float>"};
  return r;
}

// Loads `artifact`, runs axpy<int> on 1000 elements, and checks every result.
void run_axpy(Loader& loader, const kcache::Artifact& artifact) {
  auto module = loader.load(artifact);
  ASSERT_TRUE(module.has_value()) << module.error().describe() << "\n" << module.error().log;
  auto kernel = module->kernel("axpy<int>");  // by name expression, through the symbol map
  ASSERT_TRUE(kernel.has_value()) << kernel.error().describe();
  constexpr int n = 1000;
  std::vector<int> x(n), y(n);
  std::iota(x.begin(), x.end(), 0);
  std::fill(y.begin(), y.end(), 7);
  auto dx = loader.allocate(n * sizeof(int));
  auto dy = loader.allocate(n * sizeof(int));
  ASSERT_TRUE(dx && dy);
  ASSERT_TRUE(dx->upload(x.data(), n * sizeof(int)));
  ASSERT_TRUE(dy->upload(y.data(), n * sizeof(int)));
  int a = 3;
  int count = n;
  void* args[] = {&dy->address(), &dx->address(), &a, &count};
  kcache::LaunchConfig cfg;
  cfg.grid_x = (n + 255) / 256;
  cfg.block_x = 256;
  ASSERT_TRUE(loader.launch_and_wait(*kernel, cfg, args));
  ASSERT_TRUE(dy->download(y.data(), n * sizeof(int)));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(y[static_cast<std::size_t>(i)], 3 * i + 7) << i;
  }
}

}  // namespace

TEST(LoaderGpu, CubinForThisDeviceLoadsAndComputes) {
  KCACHE_REQUIRE_NVRTC();
  KCACHE_REQUIRE_GPU(loader);
  auto out = kcache::compile_in_process(template_request("cubin", device_arch(*loader)));
  ASSERT_TRUE(out.has_value()) << out.error().describe();
  run_axpy(*loader, out->artifact);
  EXPECT_EQ(loader->driver_loads(), 1U);
}

TEST(LoaderGpu, PtxIsJitCompiledByTheDriverAndComputes) {
  KCACHE_REQUIRE_NVRTC();
  KCACHE_REQUIRE_GPU(loader);
  auto out = kcache::compile_in_process(template_request("ptx", "compute_75"));
  ASSERT_TRUE(out.has_value()) << out.error().describe();
  run_axpy(*loader, out->artifact);
}

TEST(LoaderGpu, IncompatibleCubinIsRefusedBeforeTheDriverIsCalled) {
  KCACHE_REQUIRE_NVRTC();
  KCACHE_REQUIRE_GPU(loader);
  const int major = loader->device().cc_major;
  const std::string other = major == 8 ? "sm_90" : "sm_80";
  auto out = kcache::compile_in_process(template_request("cubin", other));
  ASSERT_TRUE(out.has_value()) << out.error().describe();
  auto m = loader->load(out->artifact);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::unsupported);
  EXPECT_EQ(loader->driver_loads(), 0U);
}

TEST(LoaderGpu, UnknownKernelNameListsTheKnownNameExpressions) {
  KCACHE_REQUIRE_NVRTC();
  KCACHE_REQUIRE_GPU(loader);
  auto out = kcache::compile_in_process(template_request("cubin", device_arch(*loader)));
  ASSERT_TRUE(out.has_value());
  auto module = loader->load(out->artifact);
  ASSERT_TRUE(module.has_value());
  auto k = module->kernel("axpy<double>");
  ASSERT_FALSE(k.has_value());
  EXPECT_EQ(k.error().code, ErrorCode::not_found);
  EXPECT_NE(k.error().message.find("axpy<int>"), std::string::npos);
}

// Run 1 compiles, loads and computes; run 2 (another process) loads the same
// program from the file store and computes, with zero compiles and zero
// toolkit loads (counted).
TEST(LoaderGpu, SecondRunLoadsFromTheCacheWithoutInvokingTheCompiler) {
  KCACHE_REQUIRE_NVRTC();
  {
    KCACHE_REQUIRE_GPU(probe);
  }
  kcache::test::TempDir dir;
  auto run = [&](int fd) {
    kcache::Toolkit::instance().set_memo_dir(dir.path() / "memo");
    const auto loads_before = kcache::Toolkit::instance().load_count();  // the parent may have loaded NVRTC
    auto loader = Loader::open();
    if (!loader) {
      ::_exit(9);
    }
    kcache::FileStoreOptions fo;
    fo.root = dir.path();
    auto store = kcache::FileStore::open(fo);
    if (!store) {
      ::_exit(10);
    }
    kcache::CacheOptions co;
    co.lock_dir = dir.path() / "v1" / "locks";
    kcache::Cache cache(**store, co);
    auto a = cache.get_or_compile(template_request("cubin", device_arch(**loader)));
    if (!a) {
      ::_exit(11);
    }
    run_axpy(**loader, *a);
    if (::testing::Test::HasFailure()) {
      ::_exit(12);
    }
    const std::string line = std::to_string(cache.stats().compiles) + " " +
                             std::to_string(kcache::Toolkit::instance().load_count() - loads_before) + "\n";
    (void)!::write(fd, line.data(), line.size());
    ::_exit(0);
  };
  std::vector<std::string> lines;
  for (int i = 0; i < 2; ++i) {
    const auto child = kcache::test::run_reporting_child(run);
    ASSERT_TRUE(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) << "run " << i << " " << kcache::test::describe_status(child.status);
    lines.push_back(child.output);
  }
  EXPECT_EQ(lines[0].substr(0, 2), "1 ");
  EXPECT_EQ(lines[1], "0 0\n");
}
