#!/usr/bin/env bash
# Times a whole `kcache compile` process that hits, for a kernel that reads
# 700 user headers from disk (20 directories of 35, reached through one
# umbrella header) beside the same kernel with no header, in the same run.
# The commands take turns: each batch runs every command `runs` times in a
# row, and the figure printed is the median over `batches` batch means.
# Prints one JSON object per command and the ratio (target: <= 2).
# Usage: scripts/bench-header-hit.sh [runs] [batches] [kcache binary]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
batches=${2:-5}
kcache=${3:-build/release/bin/kcache}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KCACHE_DIR=$work/cache
mkdir -p "$work/none" "$work/many/inc"
{
  for d in $(seq 0 19); do
    mkdir -p "$work/many/inc/m$d"
    for h in $(seq 0 34); do
      printf '#pragma once\n#include "h%d.h"\n__device__ inline int f_%d_%d(int x) { return x + %d; }\n' \
        $(((h + 1) % 35)) "$d" "$h" "$h" >"$work/many/inc/m$d/h$h.h"
      echo "#include <m$d/h$h.h>"
    done
  done
} >"$work/many/inc/all.h"
kernel='extern "C" __global__ void k(int* p) { p[threadIdx.x] += 1; }'
printf '%s\n' "$kernel" >"$work/none/k.cu"
printf '#include <all.h>\n%s\n' "$kernel" >"$work/many/k.cu"
# Identities younger than two seconds are not trusted by the header manifest.
sleep 2.2
declare -A cmd
cmd[none]="$kcache compile $work/none/k.cu --target ptx --arch sm_90 -o $work/none/k.ptx"
cmd[many]="$kcache compile $work/many/k.cu --target ptx --arch sm_90 -I $work/many/inc -o $work/many/k.ptx"
for n in none many; do
  ${cmd[$n]} >/dev/null  # the cold compile that fills the cache
  ${cmd[$n]} >/dev/null
done
headers=$("$kcache" compile "$work/many/k.cu" --target ptx --arch sm_90 -I "$work/many/inc" --json -o "$work/many/k.ptx" |
  grep -c '"sha256"' || true)
results=$work/results
# shellcheck source=scripts/bench-batch.sh
. scripts/bench-batch.sh
for _ in $(seq "$batches"); do
  for n in none many; do
    # shellcheck disable=SC2086  # the command lines are split on purpose
    echo "$n $(batch_us ${cmd[$n]})" >>"$results"
  done
done
median() { grep "^$1 " "$results" | cut -d' ' -f2 | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
none=$(median none)
many=$(median many)
echo "{\"bench\":\"header-hit\",\"case\":\"no header\",\"us\":$none}"
echo "{\"bench\":\"header-hit\",\"case\":\"700 headers\",\"disk_headers\":$headers,\"us\":$many}"
awk -v a="$many" -v b="$none" 'BEGIN { printf "{\"bench\":\"header-hit\",\"ratio\":%.2f,\"target\":2}\n", a / b }'
