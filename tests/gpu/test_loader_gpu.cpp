// GPU tests: real loads and kernel launches with checked results. Each test
// skips with a clear message when there is no driver or no device. Run with
// `build/ci/tests/gpu/test_gpu` or `ctest --preset ci -L gpu`.
#include "support/child.hpp"
#include "support/files.hpp"
#include "kcache/loader.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
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

// KCACHE_REQUIRE_GPU=1 (set by scripts/device-check.sh on a machine with a
// GPU) turns the skip into a failure, so a run that was meant to use the GPU
// cannot pass by skipping.
bool gpu_required() {
  const char* v = std::getenv("KCACHE_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

#define KCACHE_REQUIRE_GPU(loader)                                                    \
  std::string why_gpu_;                                                               \
  auto loader = open_or_skip_reason(why_gpu_);                                        \
  if (!loader) {                                                                      \
    if (gpu_required()) {                                                             \
      FAIL() << "KCACHE_REQUIRE_GPU=1 but no usable CUDA driver/GPU: " << why_gpu_;  \
    }                                                                                 \
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

namespace {

// One run of the test below, in a process of its own: compiles (or hits),
// loads and computes; writes "<compiles> <toolkit loads>\n" to `result`.
void one_run(const std::filesystem::path& dir, const std::filesystem::path& result) {
  kcache::Toolkit::instance().set_memo_dir(dir / "memo");
  const auto loads_before = kcache::Toolkit::instance().load_count();
  auto loader = Loader::open();
  ASSERT_TRUE(loader.has_value()) << loader.error().describe();
  kcache::FileStoreOptions fo;
  fo.root = dir;
  auto store = kcache::FileStore::open(fo);
  ASSERT_TRUE(store.has_value()) << store.error().describe();
  kcache::CacheOptions co;
  co.lock_dir = dir / "v1" / "locks";
  kcache::Cache cache(**store, co);
  auto a = cache.get_or_compile(template_request("cubin", device_arch(**loader)));
  ASSERT_TRUE(a.has_value()) << a.error().describe();
  run_axpy(**loader, *a);
  std::ofstream(result) << cache.stats().compiles << " "
                        << kcache::Toolkit::instance().load_count() - loads_before << "\n";
}

constexpr const char* k_one_run_env = "KCACHE_GPU_ONE_RUN_DIR";
constexpr const char* k_one_run_result_env = "KCACHE_GPU_ONE_RUN_RESULT";

}  // namespace

// Run 1 compiles, loads and computes; run 2 (another process) loads the same
// program from the file store and computes, with zero compiles and zero
// toolkit loads (counted). Each run is this test program started anew (fork
// and exec, then only this test), never a bare fork: a child forked after its
// parent used CUDA (the probe, the tests before) cannot use CUDA itself.
TEST(LoaderGpu, SecondRunLoadsFromTheCacheWithoutInvokingTheCompiler) {
  KCACHE_REQUIRE_NVRTC();
  if (const char* dir = std::getenv(k_one_run_env); dir != nullptr) {  // one run, started below
    one_run(dir, std::getenv(k_one_run_result_env));
    return;
  }
  {
    KCACHE_REQUIRE_GPU(probe);
  }
  kcache::test::TempDir dir;
  std::vector<std::string> lines;
  for (int i = 0; i < 2; ++i) {
    const auto result = dir.path() / ("run-" + std::to_string(i));
    // Everything the child needs is made before fork: it only calls execve.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      env_strings.emplace_back(*e);
    }
    env_strings.push_back(std::string(k_one_run_env) + "=" + dir.path().string());
    env_strings.push_back(std::string(k_one_run_result_env) + "=" + result.string());
    std::vector<char*> envp;
    for (auto& e : env_strings) {
      envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string arg0 = "test_gpu";
    std::string filter = "--gtest_filter=LoaderGpu.SecondRunLoadsFromTheCacheWithoutInvokingTheCompiler";
    char* argv[] = {arg0.data(), filter.data(), nullptr};
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execve(exe.c_str(), argv, envp.data());
      ::_exit(127);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "run " << i << ": " << kcache::test::describe_status(status);
    lines.push_back(kcache::test::read_file(result));
  }
  EXPECT_EQ(lines[0].substr(0, 2), "1 ");
  EXPECT_EQ(lines[1], "0 0\n");
}
