// `kcache nvcc` and `kcache /path/to/nvcc` with the real nvcc and host g++
// (docs/nvcc.md): hits write what nvcc writes, every mutation of the inputs
// is a miss with the bytes a plain nvcc writes, failures and commands kcache
// does not cache are nvcc's own.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "integration/nvcc_shell.hpp"
#include "support/files.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_source = R"(#include <vector>
#include <sysh.h>
#include "host.h"
#ifdef __CUDA_ARCH__
#include "dev.h"
#endif
#ifdef SHADOWED
#define SHADOW_VALUE 7
#else
#define SHADOW_VALUE 3
#endif
#ifndef EXTRA
#define EXTRA 0
#endif
__global__ void k(float* o) {
#ifdef __CUDA_ARCH__
  o[threadIdx.x] = dev_value() + SYS_VALUE + SHADOW_VALUE + EXTRA;
#endif
}
int host_entry() {
  std::vector<int> v{host_value(), SYS_VALUE, SHADOW_VALUE, EXTRA};
  return v[0] + v[1] + v[2] + v[3];
}
)";

// The compile every test starts from, and two shell functions: `ref ARGS`
// (plain nvcc, its outputs copied to ref/) and `kc ARGS` (through kcache).
constexpr const char* k_functions = R"(
base="-c src/k.cu -o out/k.o -MD -MF out/k.d -Iinc -isystem sys -gencode arch=compute_90,code=sm_90"
mkdir -p out ref
ref() { rm -f out/k.o out/k.d; "$NVCC" $base "$@" || return 1; cp out/k.o ref/k.o; cp out/k.d ref/k.d; rm -f out/k.o out/k.d; }
kc() { rm -f out/k.o out/k.d; "$K" "$NVCC" $base "$@"; }
)";

class NvccLauncher : public NvccShell {
 protected:
  void SetUp() override {
    NvccShell::SetUp();
    if (IsSkipped()) {
      return;
    }
    fs::create_directories(dir() / "src");
    fs::create_directories(dir() / "inc");
    fs::create_directories(dir() / "sys");
    write_file(dir() / "src/k.cu", k_source);
    write_file(dir() / "src/dev.h", "#pragma once\n__device__ float dev_value() { return 1.5f; }\n");
    write_file(dir() / "inc/host.h", "#pragma once\ninline int host_value() { return 2; }\n");
    write_file(dir() / "sys/sysh.h", "#pragma once\n#define SYS_VALUE 4\n");
  }

  // Runs `kc ARGS` after `ref ARGS` (with `env` before both) and checks that
  // kcache missed and wrote what plain nvcc wrote, then hit with the same.
  void expect_miss_like_nvcc(const std::string& what, const std::string& args, const std::string& env = "") {
    SCOPED_TRACE(what);
    const auto r = nv(std::string(k_functions) + env + "\nref " + args + " || exit 90\n" + env + "\nkc " + args);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(outcome(r), "compiled") << r.err;
    expect_outputs_equal_ref();
    const auto again = nv(std::string(k_functions) + env + "\nkc " + args);
    ASSERT_EQ(again.rc, 0) << again.err;
    EXPECT_EQ(outcome(again), "hit") << again.err;
    expect_outputs_equal_ref();
  }

  void expect_outputs_equal_ref() {
    EXPECT_EQ(mask_temporary_names(read_file(dir() / "out/k.o")), mask_temporary_names(read_file(dir() / "ref/k.o")));
    EXPECT_EQ(read_file(dir() / "out/k.d"), read_file(dir() / "ref/k.d"));
    EXPECT_FALSE(read_file(dir() / "out/k.o").empty());
  }
};

TEST_F(NvccLauncher, AHitWritesTheObjectAndDependencyFileTheCompileWrote) {
  const auto cold = nv(std::string(k_functions) + "ref || exit 90\nkc && cp out/k.o first.o && cp out/k.d first.d");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(outcome(cold), "compiled") << cold.err;
  expect_outputs_equal_ref();
  // The dependency file names the device-only header and the -isystem one, as nvcc's does.
  const std::string deps = read_file(dir() / "out/k.d");
  EXPECT_NE(deps.find("src/dev.h"), std::string::npos) << deps;
  EXPECT_NE(deps.find("sys/sysh.h"), std::string::npos) << deps;
  const auto warm = nv(std::string(k_functions) + "kc");
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_EQ(outcome(warm), "hit") << warm.err;
  EXPECT_EQ(read_file(dir() / "out/k.o"), read_file(dir() / "first.o"));
  EXPECT_EQ(read_file(dir() / "out/k.d"), read_file(dir() / "first.d"));
  // `kcache nvcc` finds the same nvcc through CUDA_HOME and hits the same entry.
  const auto named = nv(std::string(k_functions) + "rm -f out/k.o; CUDA_HOME=$(dirname $(dirname \"$NVCC\")) \"$K\" nvcc $base");
  EXPECT_EQ(outcome(named), "hit") << named.err;
  EXPECT_EQ(read_file(dir() / "out/k.o"), read_file(dir() / "first.o"));
  const auto stats = sh("\"$K\" stats --json");
  EXPECT_NE(stats.out.find("\"hits\": 2"), std::string::npos) << stats.out;
}

TEST_F(NvccLauncher, EveryMutationIsAMissWithTheBytesPlainNvccWrites) {
  ASSERT_EQ(nv(std::string(k_functions) + "kc").rc, 0);
  // Headers: device side, host side, through -isystem.
  write_file(dir() / "src/dev.h", "#pragma once\n__device__ float dev_value() { return 2.5f; }\n");
  expect_miss_like_nvcc("a device-side header edited", "");
  write_file(dir() / "inc/host.h", "#pragma once\ninline int host_value() { return 5; }\n");
  expect_miss_like_nvcc("a host-side header edited", "");
  write_file(dir() / "sys/sysh.h", "#pragma once\n#define SYS_VALUE 9\n");
  expect_miss_like_nvcc("a header found through -isystem edited", "");
  // A system header shadowed by a file in an -I directory: no header of the list changed.
  write_file(dir() / "inc/vector", "#define SHADOWED 1\n#include_next <vector>\n");
  expect_miss_like_nvcc("<vector> shadowed through -I", "");
  fs::remove(dir() / "inc/vector");
  // Options and the environment.
  expect_miss_like_nvcc("a -D", "-DEXTRA=11");
  expect_miss_like_nvcc("NVCC_APPEND_FLAGS", "", "export NVCC_APPEND_FLAGS=-DEXTRA=12");
  expect_miss_like_nvcc("NVCC_PREPEND_FLAGS", "", "export NVCC_PREPEND_FLAGS=-DEXTRA=13");
  expect_miss_like_nvcc("another -gencode", "-gencode arch=compute_80,code=sm_80");
  expect_miss_like_nvcc("-ccbin", "-ccbin /usr/bin/g++");
  expect_miss_like_nvcc("NVCC_CCBIN", "", "export NVCC_CCBIN=/usr/bin/g++");
  // Another host compiler with the same version: a wrapper that changes its code.
  fs::create_directories(dir() / "cc");
  write_file(dir() / "cc/gcc", "#!/bin/sh\nexec /usr/bin/gcc -fno-asynchronous-unwind-tables \"$@\"\n");
  fs::permissions(dir() / "cc/gcc", fs::perms::owner_all);
  expect_miss_like_nvcc("the host compiler replaced", "", "export PATH=\"$PWD/cc:$PATH\"");
}

TEST_F(NvccLauncher, DebugOutputIsKeyedByTheDirectoryItNames) {
  // The same tree in two directories: release objects share one entry, -G
  // and -lineinfo objects name their directory and do not.
  ASSERT_EQ(nv(std::string(k_functions) + "kc").rc, 0);
  fs::create_directories(dir() / "other");
  fs::copy(dir() / "src", dir() / "other/src", fs::copy_options::recursive);
  fs::copy(dir() / "inc", dir() / "other/inc", fs::copy_options::recursive);
  fs::copy(dir() / "sys", dir() / "other/sys", fs::copy_options::recursive);
  const auto release = nv(std::string(k_functions) + "cd other && mkdir -p out && kc");
  EXPECT_EQ(outcome(release), "hit") << release.err;
  for (const std::string opt : {"-G -no-compress", "-lineinfo"}) {
    SCOPED_TRACE(opt);
    const auto here = nv(std::string(k_functions) + "kc " + opt);
    EXPECT_EQ(outcome(here), "compiled") << here.err;
    const auto there = nv(std::string(k_functions) + "cd other && mkdir -p out ref && ref " + opt + " && kc " + opt);
    ASSERT_EQ(there.rc, 0) << there.err;
    EXPECT_EQ(outcome(there), "compiled") << there.err;
    EXPECT_EQ(mask_temporary_names(read_file(dir() / "other/out/k.o")),
              mask_temporary_names(read_file(dir() / "other/ref/k.o")));
    const auto hit = nv(std::string(k_functions) + "cd other && kc " + opt);
    EXPECT_EQ(outcome(hit), "hit") << hit.err;
  }
}

TEST_F(NvccLauncher, AFailingCompileGivesNvccsMessagesAndStatusAndIsNotStored) {
  write_file(dir() / "src/bad.cu", "__global__ void k() { undefined_name(); }\n");
  const auto plain = nv("\"$NVCC\" -c src/bad.cu -o out/bad.o");
  ASSERT_NE(plain.rc, 0);
  for (int i = 0; i < 2; ++i) {
    const auto r = nv("mkdir -p out; \"$K\" \"$NVCC\" -c src/bad.cu -o out/bad.o");
    EXPECT_EQ(r.rc, plain.rc);
    EXPECT_EQ(outcome(r), "failed") << r.err;
    EXPECT_EQ(r.err.substr(0, plain.err.size()), plain.err);
    EXPECT_NE(r.err.find("undefined_name"), std::string::npos);
  }
  const auto stats = sh("\"$K\" stats --json");
  EXPECT_NE(stats.out.find("\"failed\": 2"), std::string::npos) << stats.out;
  EXPECT_EQ(sh("\"$K\" ls --json").out, "[]\n");
}

TEST_F(NvccLauncher, CommandsKcacheDoesNotCacheRunNvccUnchangedAndAreCounted) {
  write_file(dir() / "src/b.cu", "__global__ void b() {}\n");
  struct Case {
    std::string args;
    std::string reason;
  };
  const Case cases[] = {{"-E src/b.cu", "preprocess"},
                        {"-M src/b.cu -Iinc", "dependencies_only"},
                        {"--version", "no_compile"},
                        {"-c src/b.cu src/k.cu -Iinc -isystem sys", "several_inputs"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const auto plain = nv("mkdir -p out; \"$NVCC\" " + c.args);
    const auto r = nv("mkdir -p out; \"$K\" \"$NVCC\" " + c.args);
    EXPECT_EQ(r.rc, plain.rc);
    EXPECT_EQ(mask_temporary_names(r.out), mask_temporary_names(plain.out));
    EXPECT_EQ(r.err, plain.err);
  }
  const auto stats = sh("\"$K\" stats --json");
  for (const auto& c : cases) {
    EXPECT_NE(stats.out.find("\"" + c.reason + "\": 1"), std::string::npos) << c.reason << "\n" << stats.out;
  }
  EXPECT_NE(stats.out.find("\"uncached\": 4"), std::string::npos) << stats.out;
}

TEST_F(NvccLauncher, ADamagedEntryIsRecompiledNeverServed) {
  const auto cold = nv(std::string(k_functions) + "ref || exit 90\nkc");
  ASSERT_EQ(cold.rc, 0) << cold.err;
  const auto at = cold.err.find("(object ");
  ASSERT_NE(at, std::string::npos) << cold.err;
  const std::string key = cold.err.substr(at + 8, 64);
  const fs::path entry = cache() / "v1/entries" / key.substr(0, 2) / key;
  ASSERT_TRUE(fs::exists(entry));
  std::string bytes = read_file(entry);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
  write_file(entry, bytes);
  const auto r = nv(std::string(k_functions) + "kc");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(outcome(r), "compiled") << r.err;
  expect_outputs_equal_ref();
  EXPECT_EQ(outcome(nv(std::string(k_functions) + "kc")), "hit");
  expect_outputs_equal_ref();
}

TEST_F(NvccLauncher, WhyMissNamesTheFieldThatDiffers) {
  const auto a = nv(std::string(k_functions) + "kc");
  const auto b = nv(std::string(k_functions) + "kc -DEXTRA=3");
  write_file(dir() / "inc/host.h", "#pragma once\ninline int host_value() { return 8; }\n");
  // (A header changed less than a tick of the file clock before the compile
  // is compiled but not stored: the compile might have read it half-written.)
  const auto c = nv(std::string(k_functions) + "sleep 0.3; kc");
  const auto key = [](const ShellRun& r) {
    const auto at = r.err.find("(object ");
    return at == std::string::npos ? std::string() : r.err.substr(at + 8, 64);
  };
  const auto ab = sh("\"$K\" why-miss " + key(a) + " " + key(b));
  EXPECT_NE(ab.out.find("option"), std::string::npos) << ab.out;
  EXPECT_NE(ab.out.find("--define-macro=EXTRA=3"), std::string::npos) << ab.out;
  const auto ac = sh("\"$K\" why-miss " + key(a) + " " + key(c));
  EXPECT_NE(ac.out.find("header:inc/host.h"), std::string::npos) << ac.out;
  EXPECT_EQ(ac.out.find("option"), std::string::npos) << ac.out;
}

TEST_F(NvccLauncher, ProcessesAskingForOneColdKeyCompileItOnce) {
  const std::string wrapper = make_counting_nvcc(root() / "cuda", nvcc());
  const auto r = sh("export KCACHE_TEST_NVCC_LOG=$PWD/nvcc.log\n"
                    "for i in 1 2 3 4; do mkdir -p o$i; (\"$K\" '" + wrapper +
                    "' -c src/k.cu -o o$i/k.o -Iinc -isystem sys -gencode arch=compute_90,code=sm_90 "
                    "2>o$i/err; echo $? > o$i/rc) & done; wait");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_lines(dir() / "nvcc.log"), 1u) << read_file(dir() / "nvcc.log");
  for (int i = 1; i <= 4; ++i) {
    const std::string o = "o" + std::to_string(i);
    EXPECT_EQ(read_file(dir() / o / "rc"), "0\n") << read_file(dir() / o / "err");
    EXPECT_EQ(read_file(dir() / o / "k.o"), read_file(dir() / "o1/k.o"));
  }
}

}  // namespace
}  // namespace kcache::test
