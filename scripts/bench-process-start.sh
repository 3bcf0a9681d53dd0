#!/usr/bin/env bash
# Whole-process cost of a cache hit, paired in one run (issue 23 item 3):
# /bin/true, a libc-only "hello", `kcache --version`, a `kcache compile` hit
# and a ccache + nvcc hit of the same three kernels, then the cold overhead of
# the CLI (a cold `kcache compile` into a new, empty cache directory against
# the same compile with the cache disabled).
# The commands take turns: each batch runs every command `runs` times in a
# row, and the figure printed is the median over `batches` batch means, so a
# burst of load on this shared machine moves one batch, not the result.
# Usage: scripts/bench-process-start.sh [runs] [batches] [cold_runs]
#        (after `cmake --preset release && cmake --build --preset release`)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
batches=${2:-5}
cold_runs=${3:-10}
kcache=${KCACHE_BIN:-build/release/bin/kcache}
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KCACHE_DIR=$work/kcache
export CCACHE_DIR=$work/ccache
unset KCACHE_REMOTE
printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' >"$work/hello.c"
cc -O2 -o "$work/hello" "$work/hello.c"

# shellcheck source=scripts/bench-batch.sh
. scripts/bench-batch.sh

declare -A cmd
names=("/bin/true" "hello (libc only)" "kcache --version")
cmd["/bin/true"]="/bin/true"
cmd["hello (libc only)"]="$work/hello"
cmd["kcache --version"]="$kcache --version"
# Sources and outputs in separate directories: an output written beside its
# source changes the source directory, which the header scanner then cannot
# trust for 2 s (a racy timestamp) and re-checks on every run.
mkdir "$work/src" "$work/out"
for k in trivial medium heavy_cub; do
  cp "bench/corpus/$k.cu" "$work/src/$k.cu"
  cmd["kcache hit, $k"]="$kcache compile $work/src/$k.cu --target cubin --arch sm_90 -I $cuda/include/cccl -o $work/out/$k.cubin"
  cmd["ccache nvcc hit, $k"]="ccache $cuda/bin/nvcc -c $work/src/$k.cu -arch sm_90 -I $cuda/include/cccl -o $work/out/$k.o"
  # shellcheck disable=SC2086  # the command lines are split on purpose
  ${cmd["kcache hit, $k"]} >/dev/null   # the cold compiles that fill both caches
  # shellcheck disable=SC2086
  ${cmd["ccache nvcc hit, $k"]} >/dev/null
  names+=("kcache hit, $k" "ccache nvcc hit, $k")
done
sleep 2.5  # past the racy window of the files just written
# KCACHE_BASELINE_BIN (another build, e.g. of main) adds its --version and hits, in the same turns.
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  cmd["baseline --version"]="$KCACHE_BASELINE_BIN --version"
  names+=("baseline --version")
  for k in trivial medium heavy_cub; do
    cmd["baseline hit, $k"]="$KCACHE_BASELINE_BIN compile --cache-dir $work/baseline $work/src/$k.cu --target cubin --arch sm_90 -I $cuda/include/cccl -o $work/out/$k.base.cubin"
    # shellcheck disable=SC2086
    ${cmd["baseline hit, $k"]} >/dev/null
    names+=("baseline hit, $k")
  done
fi
results=$work/results
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }
for _ in $(seq "$batches"); do
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086
    echo "$n|$(batch_us ${cmd[$n]})" >>"$results"
  done
done
true_us=$(median_of "/bin/true")
for n in "${names[@]}"; do
  m=$(median_of "$n")
  printf '%-28s %7d us  %5.2fx /bin/true\n' "$n" "$m" "$(ratio "$m" "$true_us")"
done
for k in trivial medium heavy_cub; do
  printf 'ccache+nvcc / kcache, %-10s %5.2fx\n' "$k" \
    "$(ratio "$(median_of "ccache nvcc hit, $k")" "$(median_of "kcache hit, $k")")"
done

# Cold overhead of the CLI: a cold compile into an empty cache directory (new
# each run: the check table, counters and header memos are made, the entry
# written; the per-user toolkit memo is warm, as on any machine after its first compile)
# against the same compile with the cache disabled; turns alternate.
cold_overhead() {  # label binary: prints the medians and the median of the paired differences
  local i s turn du_kib=0 pairs=$work/pairs
  : >"$pairs"
  for i in $(seq "$cold_runs"); do
    rm -rf "$work/cold"
    local off_us on_us
    for turn in $((i % 2)) $((1 - i % 2)); do  # the two take turns going first
      s=$(date +%s%N)
      if [ "$turn" = 0 ]; then
        KCACHE_DISABLE=1 "$2" compile "$work/src/trivial.cu" --target cubin --arch sm_90 -o "$work/out/off.cubin" >/dev/null
        off_us=$((($(date +%s%N) - s) / 1000))
      else
        KCACHE_DIR=$work/cold "$2" compile "$work/src/trivial.cu" --target cubin --arch sm_90 -o "$work/out/on.cubin" >/dev/null
        on_us=$((($(date +%s%N) - s) / 1000))
      fi
    done
    echo "$off_us $on_us" >>"$pairs"
    [ "$i" = 1 ] && du_kib=$(du -sk "$work/cold" | cut -f1)
  done
  sort -n -k1 "$pairs" | awk '{v[NR]=$1} END {printf "%d ", v[int((NR+1)/2)]}' >"$work/off"
  sort -n -k2 "$pairs" | awk '{v[NR]=$2} END {printf "%d ", v[int((NR+1)/2)]}' >"$work/on"
  awk '{print ($2 - $1) * 100 / $1}' "$pairs" | sort -g | awk '{v[NR]=$1} END {printf "%+.2f", v[int((NR+1)/2)]}' >"$work/d"
  printf '%s cold trivial compile (median of %d pairs): cache off %s us, cache on (empty dir) %s us; overhead, median of the paired differences: %s%%; the one-entry directory: %s KiB (du)\n' \
    "$1" "$cold_runs" "$(cat "$work/off")" "$(cat "$work/on")" "$(cat "$work/d")" "$du_kib"
}
cold_overhead kcache "$kcache"
# The same with the put's fsyncs (`fsync = file`, the default before issue 23).
KCACHE_FSYNC=file cold_overhead "kcache (fsync=file)" "$kcache"
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  cold_overhead baseline "$KCACHE_BASELINE_BIN"
fi
