#!/usr/bin/env bash
# bench/bundle_startup.sh: start-up of a process that needs 100 kernels, on a
# fresh machine: an empty cache (every kernel compiled by NVRTC) against an
# empty cache with a bundle tier (KCACHE_BUNDLES: every kernel a hit from the
# mapped bundle). One `kcache compile` process of 100 sources each time.
#
#   bench/bundle_startup.sh [build/ci/bin/kcache] [runs]
#
# Prints the median wall time of each, and their ratio. Needs the CUDA toolkit
# (NVRTC) for the cold compiles; no GPU.
set -euo pipefail
K=${1:-build/ci/bin/kcache}
K=$(readlink -f "$K")
RUNS=${2:-5}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir src
for i in $(seq 1 100); do
  cat > "src/k$i.cu" <<CU
extern "C" __global__ void k$i(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { out[i] = value * $i.0f + $i; }
}
CU
done
run() {  # run DIR KEEP ENV...: one process, 100 kernels; prints seconds (KEEP=1 keeps DIR from the last run)
  local dir=$1 keep=$2; shift 2
  [ "$keep" = 1 ] || rm -rf "$dir"
  rm -rf out && mkdir out
  if [ "$keep" = install ]; then  # a fresh cache with the bundle installed (not timed)
    rm -rf "$dir"
    KCACHE_DIR="$WORK/$dir" "$K" bundle install kernels.kcb --trust ci.key.pub >/dev/null
  fi
  local t0 t1
  t0=$(date +%s.%N)
  (cd out && env KCACHE_DIR="$WORK/$dir" "$@" "$K" compile -q -j 1 ../src/*.cu --target cubin --arch sm_90 \
    >/dev/null 2>&1)
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# CI: compile once, bundle, sign.
KCACHE_DIR="$WORK/ci" "$K" bundle keygen ci.key >/dev/null
(mkdir -p ci-out && cd ci-out && KCACHE_DIR="$WORK/ci" "$K" compile -q ../src/*.cu --target cubin --arch sm_90 \
  >/dev/null 2>&1)
KCACHE_DIR="$WORK/ci" "$K" bundle create --sign ci.key -o kernels.kcb >/dev/null
BUNDLE=(KCACHE_BUNDLES="$WORK/kernels.kcb" KCACHE_BUNDLE_TRUSTED_KEYS="$WORK/ci.key.pub")
cold=$(for r in $(seq "$RUNS"); do run empty 0; done | median)
bundled=$(for r in $(seq "$RUNS"); do run fresh 0 "${BUNDLE[@]}"; done | median)
# The bundle runs compiled nothing and wrote no entry.
test -z "$(find "$WORK/fresh/v1/entries" -name '*.pass' 2>/dev/null)"
installed=$(for r in $(seq "$RUNS"); do run inst install; done | median)
bundled_again=$(for r in $(seq "$RUNS"); do run fresh 1 "${BUNDLE[@]}"; done | median)
installed_again=$(for r in $(seq "$RUNS"); do run inst 1; done | median)
echo "first process on a fresh machine (a new, empty cache directory):"
echo "  empty cache, 100 NVRTC compiles:     ${cold} s"
echo "  bundle tier (KCACHE_BUNDLES):        ${bundled} s   ($(echo "scale=1; $cold / $bundled" | bc)x faster)"
echo "  bundle installed into the cache:     ${installed} s"
echo "later processes (the cache directory now holds kcache's toolkit and header memos):"
echo "  bundle tier:                         ${bundled_again} s"
echo "  installed bundle (disk tier):        ${installed_again} s"
