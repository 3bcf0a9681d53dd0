#!/usr/bin/env bash
# scripts/tsan-run-tests.sh: the `kcache run` tests under ThreadSanitizer (docs/run.md,
# "Thread safety"; issue 20, "many threads compiling at once inside one interposed process").
#
#   scripts/tsan-run-tests.sh [CTEST_REGEX]
#
# Configures the tsan preset (build/tsan) and builds only what these tests need: the stand-in
# library (kcache_interpose), the kcache command, the test client programs and the
# integration test binary, all with -fsanitize=thread. Then runs the tests whose programs are
# all built here (default regex "RunInterpose|JitResult"): the client programs and the stand-in
# run with TSan's runtime first in LD_PRELOAD. Tests that would run programs built without TSan
# (sh, RTLD_DEEPBIND, which the sanitizer runtimes refuse) skip and say why. Any TSan report
# makes the program exit 66, which fails its test. Not part of CI (.ci/run): a tsan build of
# these targets takes ~45 min on 2 cores without a warm compiler cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
regex=${1:-RunInterpose|JitResult}
if [ -f /work/ccache.env ]; then
  . /work/ccache.env
fi
cmake --preset tsan >/dev/null
targets=(kcache_cli kcache_interpose interpose_nvrtc_client_dlopen test_integration)
for t in interpose_nvrtc_client_linked interpose_nvrtc_client_plugin test_interpose; do
  if ninja -C build/tsan -t targets all 2>/dev/null | grep -q "^$t:"; then
    targets+=("$t")
  fi
done
cmake --build build/tsan -j "${JOBS:-2}" --target "${targets[@]}"
# halt_on_error=0: every report is printed; exitcode 66 (TSan's default) fails the test.
export TSAN_OPTIONS="${TSAN_OPTIONS:-second_deadlock_stack=1 history_size=4}"
ctest --test-dir build/tsan -R "$regex" --output-on-failure -j "${JOBS:-2}"
