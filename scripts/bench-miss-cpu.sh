#!/usr/bin/env bash
# CPU (task-clock) of fresh processes (docs/history/performance-jit.md,
# "Misses into a new cache directory"):
# plain NVRTC vs a kcache miss into a new cache directory, with the user's memos warmed by one
# compile of another variant (newdir) and with a new user, an empty XDG_CACHE_HOME (firstuse).
#   KCACHE_BENCH_CUPY=$(scripts/fetch-cupy-headers.sh) scripts/bench-miss-cpu.sh build/ci/bench/bench_miss cupy 4
#   (kind cccl needs KCACHE_BENCH_CCCL=<a copy of the toolkit's include/cccl>)
set -u
B=$1; K=$2; N=${3:-5}; T=$(mktemp -d "${TMPDIR:-/tmp}/kcache-miss-cpu.XXXXXX")
tc() { perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/{print $1}'; }
XDG_CACHE_HOME=$T/user $B child kcache $K 8000 1 $T/warmup >/dev/null; sleep 3
for i in $(seq 1 $N); do
  p=$(tc $B child plain $K $((8100+i)) 1 -)
  e=$(XDG_CACHE_HOME=$T/user tc $B child kcache $K $((8200+i)) 1 $T/empty$i)
  f=$(XDG_CACHE_HOME=$T/new$i tc $B child kcache $K $((8300+i)) 1 $T/first$i)
  echo "$K plain_ms=$p newdir_ms=$e firstuse_ms=$f"
done
rm -rf $T
