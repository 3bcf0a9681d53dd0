#!/usr/bin/env bash
# CPU (task-clock) of fresh processes, two builds of bench_miss paired in the same rounds
# (docs/performance.md, "Misses and cold compiles"): plain NVRTC, then
# a kcache miss of a new kernel variant into a new cache directory (the user's memos warm) and
# into a warm one, for build A and build B in turn. Prints the medians and each build's cost over
# plain (median and quartiles of the per-round differences): steadier than unpaired runs on a
# loaded machine.
#   KCACHE_BENCH_CUPY=$(scripts/fetch-cupy-headers.sh) scripts/bench-miss-pair.sh MAIN/bench_miss build/ci/bench/bench_miss cupy 30
set -u
A=$1; B=$2; K=${3:-cupy}; N=${4:-20}; T=$(mktemp -d "${TMPDIR:-/tmp}/kcache-miss-pair.XXXXXX")
tc() { perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/{print $1}'; }
XDG_CACHE_HOME=$T/user $A child kcache $K 8000 1 $T/warmup >/dev/null
XDG_CACHE_HOME=$T/user $A child kcache $K 8001 1 $T/warm-a >/dev/null
XDG_CACHE_HOME=$T/user $B child kcache $K 8002 1 $T/warm-b >/dev/null
sleep 3  # identities older than the racy window
for i in $(seq 1 "$N"); do
  p=$(tc "$A" child plain $K $((8100+i)) 1 -)
  na=$(XDG_CACHE_HOME=$T/user tc "$A" child kcache $K $((8200+i)) 1 $T/new-a$i)
  nb=$(XDG_CACHE_HOME=$T/user tc "$B" child kcache $K $((8300+i)) 1 $T/new-b$i)
  wa=$(XDG_CACHE_HOME=$T/user tc "$A" child kcache $K $((8400+i)) 1 $T/warm-a)
  wb=$(XDG_CACHE_HOME=$T/user tc "$B" child kcache $K $((8500+i)) 1 $T/warm-b)
  echo "$p $na $nb $wa $wb"
done > "$T/rounds"
here=$(cd "$(dirname "$0")/.." && pwd)
python3 "$here/bench/paired_summary.py" "$T/rounds" medians "$K"
python3 "$here/bench/paired_summary.py" "$T/rounds" cpu 1 2 "new dir, A"
python3 "$here/bench/paired_summary.py" "$T/rounds" cpu 1 3 "new dir, B"
python3 "$here/bench/paired_summary.py" "$T/rounds" cpu 1 4 "warm dir, A"
python3 "$here/bench/paired_summary.py" "$T/rounds" cpu 1 5 "warm dir, B"
rm -rf "$T"
