#!/usr/bin/env bash
# Times a whole `kcache compile` process that hits the medium kernel from a
# mounted bundle (KCACHE_BUNDLES, an empty cache directory) of 2, 1,000 and
# 10,000 entries, against the same hit from the file store, in one run.
# Each bundle holds the medium kernel's cubin and filler entries (`kcache put`
# of small distinct files), signed with a key the processes trust. The cache
# directory of a bundle run holds one other entry (so it keeps kcache's memos,
# as any used cache does), never the kernel.
# The commands take turns: each batch runs every command `runs` times in a
# row; the figure printed is the median over `batches` batch means, with the
# smallest and largest batch mean as its spread, and its ratio to the
# file-store hit of the same batches.
# Usage: scripts/bench-bundle-hit.sh [runs] [batches] [kcache binary]
#        (default build/release/bin/kcache; needs NVRTC for the one cold compile)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
batches=${2:-5}
kcache=$(readlink -f "${3:-build/release/bin/kcache}")
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
work=$(mktemp -d)
results=$(mktemp)
trap 'rm -rf "$work" "$results"' EXIT
# shellcheck source=scripts/bench-batch.sh
. scripts/bench-batch.sh
compile=("$kcache" compile bench/corpus/medium.cu --target cubin --arch sm_90 -I "$cuda/include/cccl" -o "$work/out.cubin")
KCACHE_DIR="$work/files" "${compile[@]}" >/dev/null  # the cold compile: the file store's entry
KCACHE_DIR="$work/files" "$kcache" bundle keygen "$work/team.key" >/dev/null
sizes=(2 1000 10000)
mkdir -p "$work/filler"
for n in "${sizes[@]}"; do
  # A cache holding the medium kernel and n-1 filler entries, bundled.
  rm -rf "$work/src" && cp -a "$work/files" "$work/src"
  for i in $(seq 2 "$n"); do
    printf 'filler entry %d of a %d-entry bundle\n' "$i" "$n" >"$work/filler/f"
    KCACHE_DIR="$work/src" "$kcache" put "$work/filler/f" --kind blob >/dev/null
  done
  KCACHE_DIR="$work/src" "$kcache" bundle create --sign "$work/team.key" -o "$work/b$n.kcb" >/dev/null
  # A cache directory that holds another entry, not the kernel: the bundle
  # serves the hit, the directory keeps kcache's toolkit and header memos.
  KCACHE_DIR="$work/empty$n" "$kcache" put "$work/filler/f" --kind blob >/dev/null
done
rm -rf "$work/src"
declare -A cmd
cmd["file store"]="env KCACHE_DIR=$work/files ${compile[*]}"
names=("file store")
for n in "${sizes[@]}"; do
  name="bundle of $n entries"
  cmd[$name]="env KCACHE_DIR=$work/empty$n KCACHE_BUNDLES=$work/b$n.kcb KCACHE_BUNDLE_TRUSTED_KEYS=$work/team.key.pub ${compile[*]}"
  names+=("$name")
done
for n in "${names[@]}"; do
  # shellcheck disable=SC2086  # the command lines are split on purpose
  ${cmd[$n]} >/dev/null  # the first run of each fills its memos (not timed)
done
# Every bundle run hit: no entry was written beside the one other entry.
for n in "${sizes[@]}"; do
  test "$(find "$work/empty$n" -name '*.pass' 2>/dev/null | wc -l)" -le 1 || { echo "bundle of $n entries did not hit" >&2; exit 1; }
done
sleep 2  # the bundles' times settle (bundle/bundle_verdicts.hpp); the next run of each is remembered
for n in "${names[@]}"; do
  # shellcheck disable=SC2086
  ${cmd[$n]} >/dev/null
done
run_batches
base=$(median_of "file store")
for n in "${names[@]}"; do
  m=$(median_of "$n")
  lo=$(grep -F "$n|" "$results" | cut -d'|' -f2 | sort -n | head -1)
  hi=$(grep -F "$n|" "$results" | cut -d'|' -f2 | sort -n | tail -1)
  printf '%-24s %6d us  (batches %d..%d)  %.2fx the file-store hit\n' "$n:" "$m" "$lo" "$hi" "$(echo "$m / $base" | bc -l)"
done
