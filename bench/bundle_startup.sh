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
run() {  # run DIR ENV...: one process, 100 kernels; prints seconds
  local dir=$1; shift
  rm -rf "$dir" out && mkdir out
  local t0 t1
  t0=$(date +%s.%N)
  (cd out && env KCACHE_DIR="$WORK/$dir" "$@" "$K" compile -q -j 1 ../src/*.cu --target cubin --arch sm_90 >/dev/null)
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# CI: compile once, bundle, sign.
KCACHE_DIR="$WORK/ci" "$K" bundle keygen ci.key >/dev/null
(mkdir -p ci-out && cd ci-out && KCACHE_DIR="$WORK/ci" "$K" compile -q ../src/*.cu --target cubin --arch sm_90 >/dev/null)
KCACHE_DIR="$WORK/ci" "$K" bundle create --sign ci.key -o kernels.kcb >/dev/null
cold=$(for r in $(seq "$RUNS"); do run empty; done | median)
bundled=$(for r in $(seq "$RUNS"); do run fresh KCACHE_BUNDLES="$WORK/kernels.kcb" \
  KCACHE_BUNDLE_TRUSTED_KEYS="$WORK/ci.key.pub"; done | median)
warm=$(for r in $(seq "$RUNS"); do (cd ci-out && env KCACHE_DIR="$WORK/ci" /usr/bin/time -f %e "$K" compile -q \
  ../src/*.cu --target cubin --arch sm_90 2>&1 >/dev/null); done | median)
echo "empty cache (100 NVRTC compiles): ${cold} s"
echo "empty cache + bundle tier:        ${bundled} s"
echo "warm local disk cache (reference): ${warm} s"
echo "speed-up of the bundle tier over an empty cache: $(echo "scale=1; $cold / $bundled" | bc)x"
