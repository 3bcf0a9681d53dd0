// Option spellings against the real NVRTC: for each spelling, what kcache
// compiles (with a cache, a miss then a hit) is what NVRTC does with the
// user's strings as given. NVRTC 13.0 refuses `-w -G`, `-Gx`, `-dopt on`,
// `-Xptxas -g` and `-arch sm_90` as one argument ("unrecognized option");
// kcache used to key and compile them as -w, -G, -dopt=on, -Xptxas=-g and
// -arch=sm_90 (issue 39, item 6).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compile/backends.hpp"
#include "kcache/compiler.hpp"
#include "unit/compile/compile_test_support.hpp"

namespace kcache {
namespace {

CompileRequest request_with(std::vector<std::string> options) {
  CompileRequest r;
  r.backend = "nvrtc";
  r.name = "k.cu";
  r.source = "extern \"C\" __global__ void k(int* p) { *p = 7; }\n";
  r.target_kind = "ptx";
  r.options = std::move(options);
  return r;
}

// Compiles `options` with the real NVRTC exactly as given and through kcache
// (a store: a miss, then a hit); both accept with the same bytes, or both
// refuse. Returns whether NVRTC accepted.
bool same_as_nvrtc(const std::vector<std::string>& options) {
  const std::string what = ::testing::PrintToString(options);
  const CompileRequest r = request_with(options);
  auto real = jit::run_nvrtc(r, options);
  test::MapStore store;
  for (const char* round : {"miss", "hit"}) {
    CompileInfo info;
    auto mine = compile(r, &store, &info);
    EXPECT_EQ(real.has_value(), mine.has_value())
        << what << " (" << round << "): NVRTC " << (real ? "accepts" : "refuses: " + real.error().describe())
        << ", kcache " << (mine ? "compiles it" : "refuses: " + mine.error().describe());
    if (real && mine) {
      EXPECT_EQ(real->payload, std::string(mine->payload)) << what << " (" << round << ")";
    }
    if (!mine) {
      // NVRTC's own refusal, which names the option in its log.
      const std::string said = mine.error().describe() + "\n" + mine.error().log;
      EXPECT_NE(said.find("unrecognized option"), std::string::npos) << what << ": " << said;
    }
  }
  return real.has_value();
}

TEST(OptionSpellings, OptionsNvrtcRefusesAreRefusedAsNvrtcDoes) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const std::string bad : {"-w -G", "-Gx", "-dopt on", "-Xptxas -g", "-arch sm_90"}) {
    EXPECT_FALSE(same_as_nvrtc({"-arch=sm_90", bad})) << bad << ": NVRTC 13 accepted it";
  }
  EXPECT_FALSE(same_as_nvrtc({"-arch=sm_90", "-std", "c++17"}));
}

TEST(OptionSpellings, SpellingsNvrtcAcceptsCompileAsNvrtcDoes) {
  KCACHE_REQUIRE_TOOLKIT();
  for (const auto& good : std::vector<std::vector<std::string>>{{"-arch", "sm_90", "-G"},
                                                                {"-arch=sm_90", " -G"},
                                                                {"-arch=sm_90", "-w", "-G"},
                                                                {"-arch=sm_90", "-dopt", "on"},
                                                                {"-arch=sm_90", "-dopt=on"},
                                                                {"-arch=sm_90", "-Xptxas", "-g"},
                                                                {"-arch=sm_90", "-D X=1", "-lineinfo "}}) {
    EXPECT_TRUE(same_as_nvrtc(good)) << ::testing::PrintToString(good) << ": NVRTC 13 refused it";
  }
}

}  // namespace
}  // namespace kcache
