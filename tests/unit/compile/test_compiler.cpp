#include "kcache/compiler.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "deps/header_manifest.hpp"
#include "kcache/cache.hpp"
#include "kcache/config.hpp"
#include "kcache/linker.hpp"
#include "kcache/nvvm_program.hpp"
#include "kcache/program.hpp"
#include "kcache/request_stats.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

const std::string k_saxpy =
    "template <typename T>\n"
    "__global__ void saxpy(T a, const T* x, T* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

std::string corpus(const std::string& name) {
  return test::read_file(std::string(KCACHE_SOURCE_DIR) + "/bench/corpus/" + name);
}

TEST(Compiler, CompilesPtxCubinAndLtoirWithPassport) {
  KCACHE_REQUIRE_TOOLKIT();
  Program program(k_saxpy, "saxpy.cu");
  program.add_option("-arch=sm_90").add_name_expression("saxpy<float>");
  for (const auto target : {CompileTarget::ptx, CompileTarget::cubin, CompileTarget::ltoir}) {
    CompileInfo info;
    auto a = program.compile(target, nullptr, &info);
    ASSERT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
    EXPECT_EQ(a->passport.kind, to_string(target));
    EXPECT_EQ(a->passport.producer.name, "nvrtc");
    EXPECT_FALSE(a->passport.producer.version.empty());
    EXPECT_EQ(a->passport.target.arch, "sm_90");
    EXPECT_GT(a->passport.compile_duration_us, 0u);
    EXPECT_EQ(a->passport.symbols.at("saxpy<float>"), "_Z5saxpyIfEvT_PKS0_PS0_i");
    EXPECT_TRUE(a->verify());
    EXPECT_FALSE(a->passport.key_record.fields.empty());
    // Without a store no key is derived; compile_uncached() has the request's key.
    EXPECT_NE(a->passport.key, derive_key(program.request(target))->key());
    auto keyed = compile_uncached(program.request(target));
    ASSERT_TRUE(keyed) << keyed.error().describe();
    EXPECT_EQ(keyed->passport.key, derive_key(program.request(target))->key());
  }
  auto cubin = program.compile(CompileTarget::cubin, nullptr);
  ASSERT_TRUE(cubin);
  EXPECT_TRUE(check_cubin(cubin->payload, "sm_90"));
  EXPECT_FALSE(check_cubin(cubin->payload, "sm_80"));
  auto ptx = program.compile(CompileTarget::ptx, nullptr);
  EXPECT_NE(ptx->payload.find(".target sm_90"), std::string::npos);
}

TEST(Compiler, HitReturnsTheStoredArtifactWithItsSymbolMap) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  Program program(k_saxpy, "saxpy.cu");
  program.add_option("-arch=sm_90").add_name_expression("saxpy<double>");
  CompileInfo first;
  auto a = program.compile(CompileTarget::cubin, &store, &first);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_FALSE(first.hit);
  EXPECT_TRUE(first.stored);
  EXPECT_EQ(store.puts(), 1u);
  CompileInfo second;
  auto b = program.compile(CompileTarget::cubin, &store, &second);
  ASSERT_TRUE(b);
  EXPECT_TRUE(second.hit);
  EXPECT_EQ(second.compile_us, 0u);
  EXPECT_EQ(b->payload, a->payload);
  EXPECT_EQ(b->passport.symbols, a->passport.symbols);
  EXPECT_EQ(store.puts(), 1u);
}

TEST(Compiler, HitBytesEqualFreshCompileBytesOverCorpus) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  const std::vector<std::pair<std::string, std::string>> sources = {
      {"trivial.cu", corpus("trivial.cu")}, {"medium.cu", corpus("medium.cu")}, {"saxpy.cu", k_saxpy}};
  int compared = 0;
  for (const auto& [name, source] : sources) {
    for (const auto target : {CompileTarget::ptx, CompileTarget::cubin}) {
      Program p(source, name);
      p.add_option("-arch=sm_90");
      auto cached = p.compile(target, &store);
      ASSERT_TRUE(cached) << name << ": " << cached.error().describe() << cached.error().log;
      CompileInfo info;
      auto hit = p.compile(target, &store, &info);
      ASSERT_TRUE(hit && info.hit) << name;
      auto fresh = p.compile(target, nullptr);
      ASSERT_TRUE(fresh);
      EXPECT_EQ(hit->payload, fresh->payload) << name << " " << to_string(target);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);
}

// Without a cache a compile is the backend's alone: no key is derived (no
// disk header scanned, none checked), the options NVRTC gets are those a
// cached compile hands it (same bytes), and the key is one no other compile has.
TEST(Compiler, WithoutACacheNoKeyIsDerivedAndTheBytesAreTheCachedCompiles) {
  KCACHE_REQUIRE_TOOLKIT();
  test::TempDir tmp;
  fs::create_directories(tmp.path() / "inc");
  test::write_file(tmp.path() / "inc" / "h.h", "#define V 7\n");
  test::write_file(tmp.path() / "inc" / "never.h", "#error never included\n");
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "k.cu";
  r.source = "#include <h.h>\n#if 0\n#include <never.h>\n#endif\n__global__ void k(int* p) { *p = V; }\n";
  r.target_kind = "ptx";
  r.options = {"-arch", "sm_90", "-I" + (tmp.path() / "inc").string(), "-lineinfo"};
  const auto checks = jit::manifest_checks_run();
  CompileInfo info;
  auto a = compile(r, nullptr, &info);
  ASSERT_TRUE(a) << a.error().describe() << a.error().log;
  EXPECT_EQ(jit::manifest_checks_run(), checks) << "a header check ran";
  EXPECT_EQ(info.headers.size(), 0u) << "disk headers were scanned";
  EXPECT_EQ(info.key_us, 0u);
  EXPECT_FALSE(info.cacheable);
  EXPECT_EQ(info.not_cacheable_reason, "compiled without a cache");
  EXPECT_FALSE(info.hit);
  EXPECT_TRUE(a->verify());
  auto again = compile_without_cache(r);
  ASSERT_TRUE(again);
  EXPECT_NE(again->passport.key, a->passport.key);
  test::MapStore store;
  CompileInfo cached_info;
  auto cached = compile(r, &store, &cached_info);
  ASSERT_TRUE(cached) << cached.error().describe();
  EXPECT_FALSE(cached_info.headers.empty()) << "the cached compile scanned no header";
  EXPECT_EQ(cached->payload, a->payload) << "another compile than the cached one";
  EXPECT_NE(cached->passport.key, a->passport.key);
  // Refusals are the same with the cache or without it.
  r.options.push_back("--create-pch=x.pch");
  auto refused = compile(r, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unsupported);
}

// The store of a disabled cache (KCACHE_DISABLE) is not asked: compile() and
// Cache::get_or_compile compile as without a store.
TEST(Compiler, ADisabledCacheCompilesWithNoKeyAndAsksItsStoreNothing) {
  KCACHE_REQUIRE_TOOLKIT();
  Config config;
  config.disable = true;
  auto store = open_configured_store(config);
  ASSERT_TRUE(store) << store.error().describe();
  ASSERT_TRUE((*store)->disabled());
  Program program(k_saxpy, "saxpy.cu");
  program.add_option("-arch=sm_90").add_name_expression("saxpy<float>");
  CompileInfo info;
  auto a = program.compile(CompileTarget::ptx, store->get(), &info);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_EQ(info.not_cacheable_reason, "compiled without a cache");
  EXPECT_EQ(a->passport.symbols.at("saxpy<float>"), "_Z5saxpyIfEvT_PKS0_PS0_i");
  Cache cache(**store);
  CacheOutcome outcome = CacheOutcome::hit;
  auto b = cache.get_or_compile(program.request(CompileTarget::ptx), &outcome);
  ASSERT_TRUE(b) << b.error().describe();
  EXPECT_EQ(outcome, CacheOutcome::compiled_only);
  EXPECT_EQ(b->payload, a->payload);
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().lookups, 0u);
  // Still one request, counted uncached (kcache stats, the run's summary).
  const auto counted = Cache::last_request();
  ASSERT_TRUE(counted.has_value());
  EXPECT_EQ(counted->outcome, RequestOutcome::uncached);
  EXPECT_GT(counted->compile_us, 0u);
  program.add_option("--no-such-option");
  ASSERT_FALSE(cache.get_or_compile(program.request(CompileTarget::ptx), &outcome));
  ASSERT_TRUE(Cache::last_request().has_value());
  EXPECT_EQ(Cache::last_request()->outcome, RequestOutcome::failed);
  EXPECT_EQ(cache.stats().compile_failures, 1u);
  const auto stats = (*store)->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->misses, 0u) << "the disabled store was asked";
  EXPECT_EQ(stats->puts_skipped, 0u);
}

// A compile NVRTC rejects is kept as a negative entry (test_failed_compiles.cpp).
TEST(Compiler, CompileErrorReturnsLogAndIsStoredAsAFailure) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  Program program("__global__ void k() { this_is_not_declared(); }\n", "bad.cu");
  program.add_option("-arch=sm_90");
  auto a = program.compile(CompileTarget::ptx, &store);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::compile_failed);
  EXPECT_NE(a.error().log.find("this_is_not_declared"), std::string::npos) << a.error().log;
  EXPECT_EQ(store.puts(), 1u);
  const auto entries = store.list();
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ(entries->front().kind, "failed-compile");
}

TEST(Compiler, SideEffectOptionIsRefused) {
  KCACHE_REQUIRE_TOOLKIT();
  Program program(k_saxpy, "saxpy.cu");
  program.add_option("-arch=sm_90").add_option("--create-pch=x.pch");
  auto a = program.compile(CompileTarget::ptx, nullptr);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::unsupported);
}

TEST(Compiler, ComputedIncludeIsCachedWithTheHeaderItNames) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  Program program("#define H \"h.h\"\n#include H\n__global__ void k(int* p) { *p = V; }\n", "computed.cu");
  program.add_option("-arch=sm_90").add_header("h.h", "#define V 3\n");
  CompileInfo info;
  auto a = program.compile(CompileTarget::ptx, &store, &info);
  ASSERT_TRUE(a) << a.error().describe() << a.error().log;
  EXPECT_TRUE(info.cacheable) << info.not_cacheable_reason;
  EXPECT_EQ(store.puts(), 1u);
  auto hit = program.compile(CompileTarget::ptx, &store, &info);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(info.hit);
}

// A computed include whose expansions kcache cannot bound (here 4^6
// combinations, in a branch never taken) still compiles, without the cache.
TEST(Compiler, UnboundedComputedIncludeCompilesWithoutTheCache) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  std::string source;
  for (int m = 0; m < 6; ++m) {
    for (int v = 0; v < 4; ++v) {
      source += "#if X == " + std::to_string(v) + "\n#define M" + std::to_string(m) + " v" + std::to_string(v) +
                "\n#endif\n";
    }
  }
  source += "#define H <M0/M1/M2/M3/M4/M5.h>\n#if 0\n#include H\n#endif\n__global__ void k(int* p) { *p = 1; }\n";
  Program program(source, "computed.cu");
  program.add_option("-arch=sm_90");
  CompileInfo info;
  auto a = program.compile(CompileTarget::ptx, &store, &info);
  ASSERT_TRUE(a) << a.error().describe() << a.error().log;
  EXPECT_FALSE(info.cacheable);
  EXPECT_NE(info.not_cacheable_reason.find("possible expansions"), std::string::npos) << info.not_cacheable_reason;
  EXPECT_EQ(store.puts(), 0u);
  auto key = derive_key(program.request(CompileTarget::ptx));
  ASSERT_FALSE(key);
  EXPECT_EQ(key.error().code, ErrorCode::unsupported);
  auto alone = derive_request_key(program.request(CompileTarget::ptx));
  ASSERT_FALSE(alone);
  EXPECT_EQ(alone.error().code, ErrorCode::unsupported);
}

TEST(Compiler, StoredCubinKernelsAreListedByReadelf) {
  KCACHE_REQUIRE_TOOLKIT();
  test::MapStore store;
  test::TempDir tmp;
  Program program(corpus("medium.cu"), "medium.cu");
  program.add_option("-arch=sm_90");
  ASSERT_TRUE(program.compile(CompileTarget::cubin, &store));
  auto hit = program.compile(CompileTarget::cubin, &store);
  ASSERT_TRUE(hit);
  const auto path = (tmp.path() / "medium.cubin").string();
  test::write_file(path, hit->payload);
  FILE* p = ::popen(("readelf -hsW " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) {
    out.append(buf, n);
  }
  ASSERT_EQ(::pclose(p), 0) << out;
  EXPECT_NE(out.find("_Z6matmulIfLi16EEvPKT_S2_PS0_i"), std::string::npos) << out;
  EXPECT_NE(out.find("_Z9saxpy_vecIdLi8EEvT_PKS0_PS0_i"), std::string::npos);
  EXPECT_NE(out.find("Machine:                           NVIDIA CUDA architecture"), std::string::npos) << out;
}

TEST(Compiler, LinkerLinksLtoirFromTwoPrograms) {
  KCACHE_REQUIRE_TOOLKIT();
  KCACHE_REQUIRE_LIBRARY(ToolkitLibrary::nvjitlink);
  test::MapStore store;
  Program a("extern __device__ int helper(int);\nextern \"C\" __global__ void k(int* p) { *p = helper(*p); }\n",
            "a.cu");
  a.add_option("-arch=sm_90").add_option("-rdc=true");
  Program b("__device__ int helper(int x) { return 3 * x + 1; }\n", "b.cu");
  b.add_option("-arch=sm_90").add_option("-rdc=true");
  auto la = a.compile(CompileTarget::ltoir, &store);
  auto lb = b.compile(CompileTarget::ltoir, &store);
  ASSERT_TRUE(la && lb) << (la ? lb.error().log : la.error().log);
  Linker linker;
  linker.add_option("-arch=sm_90").add_option("-lto");
  linker.add_input("a.ltoir", "ltoir", la->payload).add_input("b.ltoir", "ltoir", lb->payload);
  CompileInfo info;
  auto cubin = linker.link(&store, &info);
  ASSERT_TRUE(cubin) << cubin.error().describe() << cubin.error().log;
  EXPECT_EQ(cubin->passport.kind, "cubin");
  EXPECT_EQ(cubin->passport.producer.name, "nvjitlink");
  EXPECT_TRUE(check_cubin(cubin->payload, "sm_90"));
  CompileInfo again;
  auto hit = linker.link(&store, &again);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(again.hit);
  EXPECT_EQ(hit->payload, cubin->payload);
  Linker missing_arch;
  missing_arch.add_input("a.ltoir", "ltoir", la->payload);
  EXPECT_EQ(missing_arch.link(nullptr).error().code, ErrorCode::invalid_argument);
}

TEST(Compiler, NvvmCompilesIrToPtx) {
  KCACHE_REQUIRE_LIBRARY(ToolkitLibrary::nvvm);
  const std::string ir =
      "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"
      "target triple = \"nvptx64-nvidia-cuda\"\n"
      "define void @kern(i32 addrspace(1)* %p) {\n"
      "  store i32 42, i32 addrspace(1)* %p\n"
      "  ret void\n"
      "}\n"
      "!nvvm.annotations = !{!0}\n"
      "!0 = !{void (i32 addrspace(1)*)* @kern, !\"kernel\", i32 1}\n"
      "!nvvmir.version = !{!1}\n"
      "!1 = !{i32 2, i32 0}\n";
  test::MapStore store;
  NvvmProgram program(ir, "kern.ll");
  program.add_option("-arch=compute_90");
  CompileInfo info;
  auto ptx = program.compile(&store, &info);
  ASSERT_TRUE(ptx) << ptx.error().describe() << "\n" << ptx.error().log;
  EXPECT_NE(ptx->payload.find(".entry kern"), std::string::npos) << ptx->payload;
  EXPECT_EQ(ptx->passport.producer.name, "nvvm");
  CompileInfo again;
  auto hit = program.compile(&store, &again);
  ASSERT_TRUE(hit && again.hit);
  EXPECT_EQ(hit->payload, ptx->payload);
}

TEST(Compiler, CheckCubinRejectsWhatIsNotACudaElf) {
  EXPECT_EQ(check_cubin("not an elf", "sm_90").error().code, ErrorCode::corrupt);
  std::string elf(64, '\0');
  elf[0] = 0x7f;
  elf[1] = 'E';
  elf[2] = 'L';
  elf[3] = 'F';
  elf[4] = 2;
  elf[5] = 1;
  elf[18] = 62;  // x86-64, not CUDA
  EXPECT_NE(check_cubin(elf, "sm_90").error().message.find("190"), std::string::npos);
  elf[18] = static_cast<char>(190);
  elf[49] = 90;  // e_flags bits 8-15
  EXPECT_TRUE(check_cubin(elf, "sm_90"));
  EXPECT_FALSE(check_cubin(elf, "sm_89"));
}

}  // namespace
}  // namespace kcache
