#!/usr/bin/env bash
# Times a whole `kcache compile` process that hits, for the three benchmark
# kernels, beside `kcache --version` and /bin/true measured in the same run.
# The commands take turns: each batch runs every command `runs` times in a
# row, and the figure printed is the median over `batches` batch means, so a
# burst of load on this shared machine moves one batch, not the result.
# Usage: scripts/bench-cli-hit.sh [runs] [batches]   (after building the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
batches=${2:-5}
kcache=build/release/bin/kcache
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
export KCACHE_DIR=${KCACHE_DIR:-$(mktemp -d)}
out=$(mktemp)
results=$(mktemp)
trap 'rm -f "$out" "$results"' EXIT
batch_us() {  # command...: mean microseconds of one batch of $runs runs
  local s e
  s=$(date +%s%N)
  for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s%N)
  echo $(((e - s) / runs / 1000))
}
declare -A cmd
for k in trivial medium heavy_cub; do
  cmd["kcache compile hit, $k"]="$kcache compile bench/corpus/$k.cu --target cubin --arch sm_90 -I $cuda/include/cccl -o $out"
  ${cmd["kcache compile hit, $k"]} >/dev/null  # the cold compile that fills the cache
done
cmd["kcache --version"]="$kcache --version"
cmd["/bin/true"]="/bin/true"
names=("kcache compile hit, trivial" "kcache compile hit, medium" "kcache compile hit, heavy_cub" "kcache --version" "/bin/true")
for _ in $(seq "$batches"); do
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086  # the command lines are split on purpose
    echo "$n|$(batch_us ${cmd[$n]})" >>"$results"
  done
done
for n in "${names[@]}"; do
  median=$(grep -F "$n|" "$results" | cut -d'|' -f2 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  echo "$n: $median us (median of $batches batches of $runs)"
done
