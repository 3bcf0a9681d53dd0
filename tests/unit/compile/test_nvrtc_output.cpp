// The comparison the soundness tests use for output NVRTC does not reproduce
// (tests/support/nvrtc_output.hpp): it hides the module id's hash and process
// id, and nothing else.
#include <gtest/gtest.h>

#include <string>

#include "support/nvrtc_output.hpp"

namespace kcache {
namespace {

TEST(NvrtcOutputMask, HidesTheModuleIdHashAndProcessIdOfAnyLength) {
  // Taken from two fresh compiles of bench/corpus/heavy_cub.cu (pids 18551 and 185600).
  const std::string a = ".global .b8 _ZN49_INTERNAL_00000000_12_heavy_cub_cu_d7298206_185514cuda3std3__45__cpo5beginE[1];";
  const std::string b = ".global .b8 _ZN50_INTERNAL_00000000_12_heavy_cub_cu_4e20d3bc_1856004cuda3std3__45__cpo5beginE[1];";
  EXPECT_EQ(test::mask_module_ids(a), test::mask_module_ids(b));
  EXPECT_EQ(test::mask_module_ids(a), ".global .b8 _ZN#_INTERNAL_00000000_12_heavy_cub_cu_H_Pcuda3std3__45__cpo5beginE[1];");
  // The anonymous namespace repeats the id.
  const std::string anon =
      "_ZN49_INTERNAL_00000000_4_t_cu_a00ea58c_1966942_GLOBAL__N__00000000_4_t_cu_a00ea58c_196696hiddenE";
  EXPECT_EQ(test::mask_module_ids(anon), "_ZN#_INTERNAL_00000000_4_t_cu_H_P_GLOBAL__N__00000000_4_t_cu_H_PhiddenE");
}

TEST(NvrtcOutputMask, KeepsWhatTellsOutputsApart) {
  const std::string a = "_ZN49_INTERNAL_00000000_12_heavy_cub_cu_d7298206_185514cuda3std3__45__cpo5beginE";
  // Another entity, another source name: still different after masking.
  EXPECT_NE(test::mask_module_ids(a),
            test::mask_module_ids("_ZN49_INTERNAL_00000000_12_heavy_cub_cu_d7298206_185514cuda3std3__45__cpo3endE"));
  EXPECT_NE(test::mask_module_ids(a),
            test::mask_module_ids("_ZN49_INTERNAL_00000000_12_other_cub_cu_d7298206_185514cuda3std3__45__cpo5beginE"));
  // A module id taken from an external name is reproducible: kept as is.
  const std::string named = "_ZN27_INTERNAL_00000000_4_s_cu_f29_GLOBAL__N__00000000_4_s_cu_f6hiddenE";
  EXPECT_EQ(test::mask_module_ids(named), "_ZN#_INTERNAL_00000000_4_s_cu_f#_GLOBAL__N__00000000_4_s_cu_f6hiddenE");
  // Paths and code are untouched.
  const std::string ptx = "\t.file\t1 \"/tmp/a/k.cu\"\n\tmov.u32 \t%r1, 2;\n";
  EXPECT_EQ(test::mask_module_ids(ptx), ptx);
}

TEST(NvrtcOutputMask, CanonicalCubinRefusesWhatIsNotElf64) {
  EXPECT_FALSE(test::canonical_cubin("not an elf"));
  EXPECT_FALSE(test::canonical_cubin(std::string("\x7f" "ELF\x01\x01", 6) + std::string(60, '\0')));
}

}  // namespace
}  // namespace kcache
