// util::overwrite_string: the fill is asked for exactly the size given, for
// every size and whatever the string held before (GCC 12's libstdc++ passes
// the grown capacity to resize_and_overwrite's operation instead).
#include "util/uninit_string.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kcache::util {
namespace {

TEST(OverwriteString, FillIsAskedForExactlyTheSizeGiven) {
  for (const std::size_t before : {0, 1, 15, 16, 31, 100}) {
    for (std::size_t size = 0; size <= 200; ++size) {
      std::string s(before, 'x');
      std::size_t asked = 0;
      overwrite_string(s, size, [&](char* data, std::size_t n) -> std::size_t {
        asked = n;
        for (std::size_t i = 0; i < n; ++i) {
          data[i] = static_cast<char>('a' + i % 26);
        }
        return n;
      });
      ASSERT_EQ(asked, size) << "held " << before << " bytes before";
      ASSERT_EQ(s.size(), size);
      for (std::size_t i = 0; i < size; ++i) {
        ASSERT_EQ(s[i], static_cast<char>('a' + i % 26));
      }
    }
  }
}

TEST(OverwriteString, TheStringHoldsWhatTheFillWrote) {
  std::string s = "old contents";
  overwrite_string(s, 64, [](char* data, std::size_t) -> std::size_t {
    data[0] = 'k';
    data[1] = 'c';
    return 2;
  });
  EXPECT_EQ(s, "kc");
}

}  // namespace
}  // namespace kcache::util
