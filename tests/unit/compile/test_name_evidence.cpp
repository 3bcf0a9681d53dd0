// The program name's directory left out by evidence (compile/name_evidence.hpp,
// docs/keys.md "The program name"): where the static rules cannot tell
// (`__builtin_FILE` / source_location in the closure, toolkit headers, token
// pasting), a compile under one directory is stored under the evidence key
// only when a probe compile under another directory gives the same bytes. So
// CuPy's kernels (a fresh /tmp/tmpXXXXXXXX/kern.cu each time) hit under any
// directory, and a kernel whose output does depend on the directory misses
// with the bytes of a fresh compile. Real NVRTC throughout; every source
// carries a nonce, so each run gathers its evidence afresh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "compile/name_evidence.hpp"
#include "kcache/compiler.hpp"
#include "kcache/memory_store.hpp"
#include "support/files.hpp"
#include "support/nvrtc_output.hpp"
#include "support/temp_dir.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

// A comment no earlier run's source had: its evidence is gathered in this run.
std::string nonce_line() {
  static int n = 0;
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return "// run " + std::to_string(::getpid()) + "-" + std::to_string(t) + "-" + std::to_string(n++) + "\n";
}

// The names one kernel is compiled under: CuPy's temporary directories (of
// other lengths) and a longer one. A name outside a temporary directory (a
// checkout's file, a bare basename) keys its directory with no probe
// (jit::in_temporary_directory): a cold compile there costs one compile.
std::vector<std::string> names_of(const fs::path& tmp) {
  return {(tmp / "tmpab12cd34" / "kern.cu").string(), (tmp / "tmpzz" / "kern.cu").string(),
          "/var/tmp/a-much-longer-directory/x/kern.cu"};
}

struct Case {
  std::string what;
  std::string source;
  std::vector<std::string> options;  // "-I@" stands for -I <tmp>/inc, "-I%" for the toolkit's include
  std::string header;                // <tmp>/inc/h.h
  bool hits;                         // another directory gives the same output
  std::string target = "ptx";
};

const char* const k_cat = "#define CAT(a, b) a##b\n";

std::vector<Case> cases() {
  return {
      // Pasting that forms no file name: the same bytes, so one entry for every name.
      {"pasting that forms no file name", std::string(k_cat) +
           "extern \"C\" __global__ void k(int* p) { p[0] = CAT(1, 2); }\n", {}, "", true},
      {"a header's __builtin_FILE default argument, not called", "#include <h.h>\n"
           "extern \"C\" __global__ void k(int* p) { p[0] = 3; }\n", {"-I@"},
           "__device__ inline const char* at(const char* f = __builtin_FILE()) { return f; }\n", true, "cubin"},
      // Issue 39 item 5: __FILE__ and assert formed by pasting.
      {"__FILE__ formed by pasting in the source", std::string(k_cat) +
           "__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = CAT(__FI, LE__); }\n",
           {}, "", false},
      {"sizeof(__FILE__) formed by pasting", std::string(k_cat) +
           "extern \"C\" __global__ void k(int* p) { p[0] = sizeof(CAT(__FI, LE__)); }\n", {}, "", false},
      {"a character of __FILE__ formed by pasting", std::string(k_cat) +
           "extern \"C\" __global__ void k(int* p) { p[0] = CAT(__FI, LE__)[1] == 't'; }\n", {}, "", false},
      {"assert formed by pasting", std::string(k_cat) +
           "extern \"C\" __global__ void k(int* p) { CAT(ass, ert)(p != nullptr); p[0] = 1; }\n", {}, "", false},
      {"__FILE__ pasted by an angled header's macros", "#include <h.h>\n"
           "__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = HERE; }\n", {"-I@"},
           "#define CAT(a, b) a##b\n#define HERE CAT(__FI, LE__)\n", false},
      {"a header's __builtin_FILE default argument, called", "#include <h.h>\n"
           "__device__ const char* where;\nextern \"C\" __global__ void k(int* p) { where = at(); }\n", {"-I@"},
           "__device__ inline const char* at(const char* f = __builtin_FILE()) { return f; }\n", false},
      {"cuda::std::source_location::current() used", "#include <cuda/std/source_location>\n"
           "__device__ const char* where;\n"
           "extern \"C\" __global__ void k(int* p) { where = cuda::std::source_location::current().file_name(); }\n",
           {"-I%/cccl", "-I%", "--std=c++17"}, "", false},
  };
}

CompileRequest request_for(const Case& c, const fs::path& tmp, const std::string& name, const std::string& nonce) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = name;
  r.source = nonce + c.source;
  r.target_kind = c.target;
  r.options = {"-arch=sm_90"};
  const std::string cuda = (Toolkit::instance().cuda_home() / "include").string();
  for (const auto& o : c.options) {
    if (o == "-I@") {
      r.options.push_back("-I" + (tmp / "inc").string());
    } else if (o.rfind("-I%", 0) == 0) {
      r.options.push_back("-I" + cuda + o.substr(3));
    } else {
      r.options.push_back(o);
    }
  }
  return r;
}

std::string comparable(const std::string& kind, const Artifact& a) {
  auto c = test::comparable_output(kind, std::string(a.payload));
  EXPECT_TRUE(c) << c.error().describe();
  return c ? *c : std::string();
}

std::string field(const KeyRecord& record, const std::string& name) {
  for (const auto& f : record.fields) {
    if (f.name == name) {
      return f.value;
    }
  }
  return {};
}

TEST(NameEvidence, HitsUnderAnyDirectoryExactlyWhereTheOutputDoesNotDependOnIt) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const auto& c : cases()) {
    test::TempDir tmp;
    fs::create_directories(tmp.path() / "inc");
    test::write_file(tmp.path() / "inc" / "h.h", c.header);
    const std::string nonce = nonce_line();
    const auto names = names_of(tmp.path());
    MemoryStore store(64u << 20);
    std::vector<std::string> outputs;
    // Before any compile, the key leaves the directory out by evidence.
    auto before = derive_key(request_for(c, tmp.path(), names[0], nonce));
    ASSERT_TRUE(before) << c.what << ": " << before.error().describe();
    EXPECT_TRUE(jit::left_out_by_evidence(before->record())) << c.what;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const CompileRequest r = request_for(c, tmp.path(), names[i], nonce);
      CompileInfo info;
      auto a = compile(r, &store, &info);
      ASSERT_TRUE(a) << c.what << " " << names[i] << ": " << a.error().describe() << "\n" << a.error().log;
      EXPECT_EQ(info.hit, i > 0 && c.hits) << c.what << " " << names[i];
      if (i == 0) {
        EXPECT_GT(info.evidence_us, 0u) << c.what << ": the probe compile ran";
        EXPECT_TRUE(info.stored) << c.what;
      }
      const KeyRecord& record = a->passport.key_record;
      EXPECT_EQ(jit::left_out_by_evidence(record), c.hits) << c.what << " " << names[i];
      EXPECT_EQ(field(record, "name"), c.hits ? "kern.cu" : names[i]) << c.what;
      // The bytes are those of a fresh compile under this very name.
      auto fresh = compile_without_cache(r);
      ASSERT_TRUE(fresh) << c.what << ": " << fresh.error().describe();
      EXPECT_EQ(comparable(c.target, *a), comparable(c.target, *fresh)) << c.what << " " << names[i];
      outputs.push_back(comparable(c.target, *fresh));
    }
    if (!c.hits) {
      // What a stale hit would have returned differs for some name: keeping the directory was necessary.
      EXPECT_TRUE(std::any_of(outputs.begin() + 1, outputs.end(), [&](const std::string& o) { return o != outputs[0]; }))
          << c.what;
    }
    if (!c.hits) {
      // Remembered: the next derivation keys the directory straight away.
      auto after = derive_key(request_for(c, tmp.path(), names[1], nonce));
      ASSERT_TRUE(after);
      EXPECT_FALSE(jit::left_out_by_evidence(after->record())) << c.what;
      EXPECT_EQ(field(after->record(), "name"), names[1]) << c.what;
    }
  }
}

// A caller that looked the evidence key up itself (compile_uncached, as the
// single-flight Cache and the worker pool do) gets a result it must not keep
// where the probe disagreed: no other key is returned, and the next
// derivation keys the directory.
TEST(NameEvidence, CompileUncachedDoesNotLetADirectoryDependentOutputBeKept) {
  KCACHE_REQUIRE_TOOLKIT();
  const std::string nonce = nonce_line();
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "/tmp/tmpq1w2e3r4/kern.cu";
  r.source = nonce + k_cat + "extern \"C\" __global__ void k(int* p) { p[0] = sizeof(CAT(__FI, LE__)); }\n";
  r.target_kind = "ptx";
  r.options = {"-arch=sm_90"};
  auto kb = derive_key(r);
  ASSERT_TRUE(kb) << kb.error().describe();
  ASSERT_TRUE(jit::left_out_by_evidence(kb->record()));
  CompileInfo info;
  auto a = compile_uncached(r, &info);
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_FALSE(info.cacheable);
  EXPECT_NE(info.not_cacheable_reason.find("program name's directory"), std::string::npos) << info.not_cacheable_reason;
  EXPECT_EQ(a->passport.key, kb->key());
  auto again = derive_key(r);
  ASSERT_TRUE(again);
  EXPECT_FALSE(jit::left_out_by_evidence(again->record()));
  EXPECT_EQ(field(again->record(), "name"), r.name);
  // And where the probe agrees, the result is kept under the evidence key.
  r.source = nonce + "extern \"C\" __global__ void k(int* p) { p[0] = 7; }\n// __builtin_FILE\n";
  kb = derive_key(r);
  ASSERT_TRUE(kb);
  ASSERT_TRUE(jit::left_out_by_evidence(kb->record()));
  a = compile_uncached(r, &info);
  ASSERT_TRUE(a);
  EXPECT_TRUE(info.cacheable);
  EXPECT_EQ(a->passport.key, kb->key());
}

// Where the static rules see the directory matter, no evidence is asked:
// the directory is keyed as before (a quoted include, __FILE__ named, -lineinfo).
TEST(NameEvidence, StaticRulesThatSeeTheDirectoryAskForNoEvidence) {
  KCACHE_REQUIRE_TOOLKIT();
  struct Sure {
    std::string source;
    std::vector<std::string> options;
  };
  const std::vector<Sure> sure = {
      {"#include \"q.h\"\nextern \"C\" __global__ void k(int* p) { p[0] = 1; }\n", {}},
      {"__device__ const char* w;\nextern \"C\" __global__ void k(int* p) { w = __FILE__; }\n// source_location\n",
       {}},
      {"extern \"C\" __global__ void k(int* p) { p[0] = 1; }\n// __builtin_FILE\n", {"-lineinfo"}},
      {"extern \"C\" __global__ void k(int* p) { p[0] = 1; }\n// __builtin_FILE\n", {"-G"}},
  };
  test::TempDir tmp;
  fs::create_directories(tmp.path() / "d");
  test::write_file(tmp.path() / "d" / "q.h", "\n");
  for (const auto& s : sure) {
    CompileRequest r;
    r.backend = "nvrtc";
    r.name = (tmp.path() / "d" / "kern.cu").string();
    r.source = s.source;
    r.target_kind = "ptx";
    r.options = {"-arch=sm_90"};
    r.options.insert(r.options.end(), s.options.begin(), s.options.end());
    auto kb = derive_key(r);
    ASSERT_TRUE(kb) << kb.error().describe();
    EXPECT_FALSE(jit::left_out_by_evidence(kb->record())) << s.source;
    EXPECT_EQ(field(kb->record(), "name"), r.name) << s.source;
  }
}

TEST(NameEvidence, ProbeNameDiffersAtEveryPositionAndKeepsTheBasename) {
  for (const std::string name : {"/tmp/tmpab12cd34/kern.cu", "kern.cu", "sub/kern.cu", "/kkkk/qq/k.cu", "/a.cu"}) {
    const std::string probe = jit::probe_name(name);
    const auto slash = name.rfind('/');
    const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
    const std::string dir = slash == std::string::npos ? std::string() : name.substr(0, slash);
    ASSERT_EQ(probe.substr(probe.rfind('/') + 1), base) << name;
    EXPECT_GT(probe.size(), name.size()) << name;
    for (std::size_t i = 0; i <= dir.size() && i < name.size(); ++i) {
      EXPECT_NE(probe[i], name[i]) << name << " at " << i;
    }
  }
  EXPECT_TRUE(jit::same_log("kern.cu(3): warning", "kkkkkkk/kern.cu(3): warning", "kern.cu", "kkkkkkk/kern.cu"));
  EXPECT_FALSE(jit::same_log("kern.cu(3): warning", "kkkkkkk/kern.cu(4): warning", "kern.cu", "kkkkkkk/kern.cu"));
}

// CuPy's real headers (the cupy-cuda13x wheel, scripts/fetch-cupy-headers.sh)
// with CuPy's options: an ElementwiseKernel-style and a complex<float>
// RawKernel-style source hit under another temporary directory.
TEST(NameEvidence, CupyKernelsHitUnderAnotherTemporaryDirectory) {
  KCACHE_REQUIRE_TOOLKIT();
  std::string include;
  if (const char* v = std::getenv("KCACHE_TEST_CUPY_INCLUDE"); v != nullptr && *v != '\0') {
    include = v;
  } else {
    const std::string cmd = std::string("'") + KCACHE_SOURCE_DIR + "/scripts/fetch-cupy-headers.sh' '" +
                            (fs::temp_directory_path() / "kcache-test-cupy-headers").string() + "' 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) {
      include = buf;
    }
    if (p != nullptr && ::pclose(p) != 0) {
      include.clear();
    }
    while (!include.empty() && (include.back() == '\n' || include.back() == '\r')) {
      include.pop_back();
    }
  }
  if (include.empty() || !fs::exists(fs::path(include) / "cupy" / "carray.cuh")) {
    GTEST_SKIP() << "CuPy's headers are not here and cannot be fetched (offline?): "
                    "set KCACHE_TEST_CUPY_INCLUDE or run scripts/fetch-cupy-headers.sh";
  }
  const std::string cuda = (Toolkit::instance().cuda_home() / "include").string();
  const std::vector<std::string> sources = {
      "#include <cupy/carray.cuh>\n"
      "extern \"C\" __global__ void cupy_scale(CArray<float, 1, true, true> x, CArray<float, 1, true, true> y) {\n"
      "  CUPY_FOR(i, y.size()) { y[i] = x[i] * 2.5f + 1.0f; }\n}\n",
      "#include <cupy/complex.cuh>\n"
      "extern \"C\" __global__ void cexp(const complex<float>* x, complex<float>* y, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = exp(x[i] * complex<float>(0.5f, 1.0f));\n}\n",
  };
  for (const auto& source : sources) {
    const std::string nonce = nonce_line();
    MemoryStore store(64u << 20);
    std::string first;
    for (const std::string dir : {"/tmp/tmpab12cd34", "/tmp/tmpzz9y8x7w"}) {
      CompileRequest r;
      r.backend = "nvrtc";
      r.name = dir + "/kern.cu";
      r.source = nonce + source;
      r.target_kind = "cubin";
      r.options = {"-arch=sm_90", "--std=c++17", "-I" + include, "-I" + include + "/cupy/_cccl/cub",
                   "-I" + include + "/cupy/_cccl/thrust", "-I" + include + "/cupy/_cccl/libcudacxx", "-I" + cuda};
      CompileInfo info;
      auto a = compile(r, &store, &info);
      ASSERT_TRUE(a) << a.error().describe() << "\n" << a.error().log;
      EXPECT_EQ(info.hit, !first.empty()) << r.name;
      EXPECT_TRUE(jit::left_out_by_evidence(a->passport.key_record)) << r.name;
      if (first.empty()) {
        first = std::string(a->payload);
      } else {
        auto fresh = compile_without_cache(r);
        ASSERT_TRUE(fresh);
        EXPECT_EQ(test::canonical_cubin(first).value_or("a"), test::canonical_cubin(fresh->payload).value_or("b"));
      }
    }
  }
}

}  // namespace
}  // namespace kcache
