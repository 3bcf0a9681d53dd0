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
results=$work/results
for _ in $(seq "$batches"); do
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086
    echo "$n|$(batch_us ${cmd[$n]})" >>"$results"
  done
done
true_us=$(median_of "/bin/true")
for n in "${names[@]}"; do
  m=$(median_of "$n")
  printf '%-28s %7d us  %5.2fx /bin/true\n' "$n" "$m" "$(echo "$m / $true_us" | bc -l)"
done
for k in trivial medium heavy_cub; do
  printf 'ccache+nvcc / kcache, %-10s %5.2fx\n' "$k" \
    "$(echo "$(median_of "ccache nvcc hit, $k") / $(median_of "kcache hit, $k")" | bc -l)"
done

# Cold overhead of the CLI: a cold compile into an empty cache directory (new
# each run: the check table, counters and memos are made, the entry written)
# against the same compile with the cache disabled; turns alternate.
cold=$work/cold
off_total=0
on_total=0
for i in $(seq "$cold_runs"); do
  s=$(date +%s%N)
  KCACHE_DISABLE=1 "$kcache" compile "$work/src/trivial.cu" --target cubin --arch sm_90 -o "$work/out/off.cubin" >/dev/null
  e=$(date +%s%N)
  off_total=$((off_total + e - s))
  rm -rf "$cold"
  s=$(date +%s%N)
  KCACHE_DIR=$cold "$kcache" compile "$work/src/trivial.cu" --target cubin --arch sm_90 -o "$work/out/on.cubin" >/dev/null
  e=$(date +%s%N)
  on_total=$((on_total + e - s))
  [ "$i" = 1 ] && du_kib=$(du -sk "$cold" | cut -f1)
done
printf 'cold trivial compile: cache off %d us, cache on (empty dir) %d us: overhead %+.2f%%\n' \
  $((off_total / cold_runs / 1000)) $((on_total / cold_runs / 1000)) \
  "$(echo "($on_total - $off_total) * 100 / $off_total" | bc -l)"
echo "one-entry cache directory after a cold compile: ${du_kib} KiB (du)"
