// `kcache get` racing kcache's own removals: another process clears the
// cache and puts the entry again while gets copy it. Every get is a hit
// with the exact bytes or a miss (exit 3) that leaves its output as it was;
// never "modified" (exit 4), which is for bytes changed behind kcache's back.
#include "integration/cli_shell.hpp"

#include <gtest/gtest.h>
#include <string>

namespace kcache {
namespace {

class CliGetRaces : public test::CliShell {};

TEST_F(CliGetRaces, AGetRacingClearIsAHitOrAMissNeverDamage) {
  std::string big(8 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<char>('a' + (i * 11) % 26);
  }
  const std::string key = put("big.bin", big);
  const test::ShellRun r = sh(R"SH(( while :; do "$K" put big.bin >/dev/null 2>&1; sleep 0.02; "$K" clear >/dev/null 2>&1; done ) &
janitor=$!
hit=0; miss=0; bad=0
for i in $(seq 1 30); do
  echo previous > out.bin
  "$K" get )SH" + key + R"SH( -o out.bin 2>>get.err; rc=$?
  if [ $rc = 0 ] && cmp -s out.bin big.bin; then hit=$((hit+1))
  elif [ $rc = 3 ] && [ "$(cat out.bin)" = previous ]; then miss=$((miss+1))
  else bad=$((bad+1)); echo "rc=$rc out=$(head -c 20 out.bin)" >&2; tail -n 3 get.err >&2; fi
done
kill $janitor; wait $janitor 2>/dev/null
echo "hit=$hit miss=$miss bad=$bad"; grep -c "removed from the cache while it was copied" get.err >&2)SH");
  EXPECT_NE(r.out.find("bad=0"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.err.find("was modified while it was copied"), std::string::npos) << r.err;
  GTEST_LOG_(INFO) << r.out;
}

}  // namespace
}  // namespace kcache
