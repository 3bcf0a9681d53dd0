#!/usr/bin/env bash
# Times a whole `kcache compile` process that hits, for the three benchmark
# kernels, beside `kcache --version` and /bin/true measured in the same run.
# "same -o" writes one output file again and again (a rebuild: the file
# already holds the bytes and is only touched); "new -o" writes a file that
# does not exist yet on every run.
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
fresh=$(mktemp -d)
trap 'rm -rf "$out" "$out".* "$results" "$fresh"' EXIT
# shellcheck source=scripts/bench-batch.sh
. scripts/bench-batch.sh
batch_fresh_us() {  # kernel: mean microseconds of $runs hits, each to a new output file
  local s e i
  rm -f "$fresh"/*
  s=$(date +%s%N)
  for i in $(seq "$runs"); do
    "$kcache" compile "bench/corpus/$1.cu" --target cubin --arch sm_90 -I "$cuda/include/cccl" -o "$fresh/$i" >/dev/null 2>&1
  done
  e=$(date +%s%N)
  echo $(((e - s) / runs / 1000))
}
declare -A cmd
for k in trivial medium heavy_cub; do
  cmd["kcache compile hit, same -o, $k"]="$kcache compile bench/corpus/$k.cu --target cubin --arch sm_90 -I $cuda/include/cccl -o $out.$k"
  ${cmd["kcache compile hit, same -o, $k"]} >/dev/null  # the cold compile that fills the cache
done
cmd["kcache --version"]="$kcache --version"
cmd["/bin/true"]="/bin/true"
names=("kcache compile hit, same -o, trivial" "kcache compile hit, same -o, medium" "kcache compile hit, same -o, heavy_cub"
  "kcache compile hit, new -o, trivial" "kcache compile hit, new -o, medium" "kcache compile hit, new -o, heavy_cub"
  "kcache --version" "/bin/true")
for _ in $(seq "$batches"); do
  for n in "${names[@]}"; do
    if [[ $n == *"new -o"* ]]; then
      echo "$n|$(batch_fresh_us "${n##*, }")" >>"$results"
    else
      # shellcheck disable=SC2086  # the command lines are split on purpose
      echo "$n|$(batch_us ${cmd[$n]})" >>"$results"
    fi
  done
done
for n in "${names[@]}"; do
  median=$(median_of "$n")
  echo "$n: $median us (median of $batches batches of $runs)"
done
