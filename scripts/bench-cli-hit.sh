#!/usr/bin/env bash
# Times a whole `kcache compile` process that hits, for the three benchmark
# kernels, beside `kcache --version` and /bin/true measured in the same run.
# Usage: scripts/bench-cli-hit.sh [runs]   (after building the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
kcache=build/release/bin/kcache
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
export KCACHE_DIR=${KCACHE_DIR:-$(mktemp -d)}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
per_run_us() {  # command...: mean microseconds over $runs runs
  local s e
  s=$(date +%s%N)
  for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s%N)
  echo $(((e - s) / runs / 1000))
}
for k in trivial medium heavy_cub; do
  args=(compile "bench/corpus/$k.cu" --target cubin --arch sm_90 -I "$cuda/include/cccl" -o "$out")
  "$kcache" "${args[@]}" >/dev/null  # the cold compile that fills the cache
  echo "kcache compile hit, $k: $(per_run_us "$kcache" "${args[@]}") us"
done
echo "kcache --version: $(per_run_us "$kcache" --version) us"
echo "/bin/true: $(per_run_us /bin/true) us"
