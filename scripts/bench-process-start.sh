#!/usr/bin/env bash
# Whole-process cost of a cache hit, paired in one run (issue 23 item 3):
# /bin/true, a libc-only "hello", `kcache --version`, a `kcache compile` hit
# and a ccache + nvcc hit of the same three kernels, then the cold overhead of
# the CLI (a cold `kcache compile` into a new, empty cache directory against
# the same compile with the cache disabled).
# The commands take turns: each batch runs every command `runs` times in a
# row, and the figure printed is the median over `batches` batch means, so a
# burst of load on this shared machine moves one batch, not the result.
# Usage: scripts/bench-process-start.sh [runs] [batches] [cold_rounds]
#        (the cold part also measures a miss into a cache directory in use,
#        a new source each round)
#        (after `cmake --preset release && cmake --build --preset release`);
#        KCACHE_HIT_ROUNDS=N: the paired rounds of the hits (default 101).
#        KCACHE_COLD_ONLY=1 runs only the cold overhead (its rounds are cheap:
#        ~0.2 s each, so 101 or more give a steady median).
#        SCCACHE_BIN=<sccache> adds sccache + nvcc hits of the same kernels to the
#        same turns (its server runs on a socket and a cache directory of its own;
#        a hit takes ~0.5 s, so keep runs and batches small).
#        KCACHE_OFF_ROUNDS=N adds N paired rounds of `KCACHE_DISABLE=1 kcache
#        compile` against a plain NVRTC process (bench/run_nvrtc_program
#        --compile) with the same source and options: a CCCL kernel
#        (cub::BlockReduce) and, with KCACHE_BENCH_CUPY (scripts/fetch-cupy-headers.sh),
#        a CuPy kernel over CuPy's header tree; KCACHE_OFF_ONLY=1 runs only that
#        (KCACHE_PLAIN_NVRTC=<run_nvrtc_program>: default beside the build's bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
batches=${2:-5}
cold_runs=${3:-101}
kcache=${KCACHE_BIN:-build/release/bin/kcache}
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
work=$(mktemp -d)
trap 'if [ -n "${SCCACHE_BIN:-}" ]; then "$SCCACHE_BIN" --stop-server >/dev/null 2>&1 || true; fi; rm -rf "$work"' EXIT
export KCACHE_DIR=$work/kcache
export CCACHE_DIR=$work/ccache
unset KCACHE_REMOTE
printf '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n' >"$work/hello.c"
cc -O2 -o "$work/hello" "$work/hello.c"

# shellcheck source=scripts/bench-batch.sh
. scripts/bench-batch.sh

mkdir "$work/src" "$work/out"
cp bench/corpus/trivial.cu "$work/src/trivial.cu"
if [ -z "${KCACHE_COLD_ONLY:-}" ] && [ -z "${KCACHE_OFF_ONLY:-}" ]; then
declare -A cmd
names=("/bin/true" "hello (libc only)" "kcache --version")
if [ -n "${SCCACHE_BIN:-}" ]; then
  export SCCACHE_DIR=$work/sccache SCCACHE_SERVER_UDS=$work/sccache.sock SCCACHE_IDLE_TIMEOUT=0
  "$SCCACHE_BIN" --start-server >/dev/null
fi
cmd["/bin/true"]="/bin/true"
cmd["hello (libc only)"]="$work/hello"
cmd["kcache --version"]="$kcache --version"
# Sources and outputs in separate directories: an output written beside its
# source changes the source directory, which the header scanner then cannot
# trust for 2 s (a racy timestamp) and re-checks on every run.
for k in trivial medium heavy_cub; do
  cp "bench/corpus/$k.cu" "$work/src/$k.cu"
  cmd["kcache hit, $k"]="$kcache compile $work/src/$k.cu --target cubin --arch sm_90 -I $cuda/include/cccl -o $work/out/$k.cubin"
  cmd["ccache nvcc hit, $k"]="ccache $cuda/bin/nvcc -c $work/src/$k.cu -arch sm_90 -I $cuda/include/cccl -o $work/out/$k.o"
  # shellcheck disable=SC2086  # the command lines are split on purpose
  ${cmd["kcache hit, $k"]} >/dev/null   # the cold compiles that fill both caches
  # shellcheck disable=SC2086
  ${cmd["ccache nvcc hit, $k"]} >/dev/null
  names+=("kcache hit, $k" "ccache nvcc hit, $k")
  if [ -n "${SCCACHE_BIN:-}" ]; then
    cmd["sccache nvcc hit, $k"]="$SCCACHE_BIN $cuda/bin/nvcc -c $work/src/$k.cu -arch sm_90 -I $cuda/include/cccl -o $work/out/$k.sccache.o"
    # shellcheck disable=SC2086
    ${cmd["sccache nvcc hit, $k"]} >/dev/null
    names+=("sccache nvcc hit, $k")
  fi
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
run_batches
true_us=$(median_of "/bin/true")
for n in "${names[@]}"; do
  m=$(median_of "$n")
  printf '%-28s %7d us  %5.2fx /bin/true\n' "$n" "$m" "$(ratio "$m" "$true_us")"
done
for k in trivial medium heavy_cub; do
  printf 'ccache+nvcc / kcache, %-10s %5.2fx\n' "$k" \
    "$(ratio "$(median_of "ccache nvcc hit, $k")" "$(median_of "kcache hit, $k")")"
done
# The same commands in paired rounds (bench/paired_runs.c): each round runs
# every command once, in an order rotated each round, forked and timed by a
# small C program, so no command pays the shell's fork and redirections (which
# the batches above add to every command alike, about 0.3 ms here, pulling each
# ratio towards 1). Each ratio is the median over rounds of that round's ratio,
# with its quartiles: the figures the goals are judged by.
cc -O2 -o "$work/paired_runs" bench/paired_runs.c
hit_specs=()
for n in "${names[@]}"; do
  # shellcheck disable=SC2206  # the command lines are split on purpose
  hit_specs+=(${cmd[$n]} ";")
done
"$work/paired_runs" "${KCACHE_HIT_ROUNDS:-101}" --warmup=3 "${hit_specs[@]}" >"$work/hit-pairs"
printf '%s\n' "${names[@]}" | python3 -c '
import statistics, sys
names = [l.rstrip("\n") for l in sys.stdin]
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
wall = {n: [r[2 * i] for r in rows] for i, n in enumerate(names)}
def q(v):
    v = sorted(v)
    return v[len(v) // 4], statistics.median(v), v[(3 * len(v)) // 4]
print(f"paired rounds ({len(rows)}), wall time, median [quartiles] of each round:")
for n in names:
    lo, m, hi = q(wall[n])
    r = q([a / b for a, b in zip(wall[n], wall["/bin/true"])])
    print(f"  {n:<28} {m:7.0f} us [{lo:.0f}, {hi:.0f}]  {r[1]:5.2f}x /bin/true [{r[0]:.2f}, {r[2]:.2f}]")
for peer, label in (("ccache nvcc", "ccache+nvcc"), ("sccache nvcc", "sccache+nvcc")):
    for k in ("trivial", "medium", "heavy_cub"):
        if f"{peer} hit, {k}" in wall:
            r = q([a / b for a, b in zip(wall[f"{peer} hit, {k}"], wall[f"kcache hit, {k}"])])
            print(f"  {label} / kcache, {k:<10} {r[1]:5.2f}x [{r[0]:.2f}, {r[2]:.2f}]")
' "$work/hit-pairs"
if [ -n "${SCCACHE_BIN:-}" ]; then
  for k in trivial medium heavy_cub; do
    printf 'sccache+nvcc / kcache, %-9s %6.2fx\n' "$k" \
      "$(ratio "$(median_of "sccache nvcc hit, $k")" "$(median_of "kcache hit, $k")")"
  done
  # Every timed sccache run must have been a hit: its misses are the three cold compiles above.
  "$SCCACHE_BIN" --show-stats --stats-format json | python3 -c 'import json, sys
s = json.load(sys.stdin)["stats"]
print("sccache: hits", s["cache_hits"]["counts"], "misses", s["cache_misses"]["counts"])'
fi
else
  sleep 2.5  # past the racy window of the source just copied
fi  # KCACHE_COLD_ONLY

if [ -z "${KCACHE_OFF_ONLY:-}" ]; then
# Cold overhead of the CLI: a cold compile into an empty cache directory (new
# each run: the check table, counters and header memos are made, the entry
# written; the per-user toolkit memo is warm, as on any machine after its first compile)
# against the same compile with the cache disabled. bench/paired_runs.c runs
# the commands in rounds, in an order rotated each round, and reports each
# child's wall time and CPU time (user + system of every thread, wait4), so
# each figure is a median of paired differences with its quartiles: the wall
# difference, and kcache's CPU difference (cache on minus cache off), which
# the machine's load moves far less. The same rounds hold the put with
# `fsync = file` (the default before issue 23) and, with KCACHE_BASELINE_BIN,
# that build's pair.
[ -x "$work/paired_runs" ] || cc -O2 -o "$work/paired_runs" bench/paired_runs.c
cold_args=("$work/src/trivial.cu" --target cubin --arch sm_90)
specs=(KCACHE_DISABLE=1 "$kcache" compile "${cold_args[@]}" -o "$work/out/off.cubin" ";"
       "--prep=rm -rf $work/cold" "KCACHE_DIR=$work/cold" "$kcache" compile "${cold_args[@]}" -o "$work/out/on.cubin" ";"
       "--prep=rm -rf $work/cold-fsync" "KCACHE_DIR=$work/cold-fsync" KCACHE_FSYNC=file "$kcache" compile
       "${cold_args[@]}" -o "$work/out/on-fsync.cubin" ";")
# A plain NVRTC process (bench/run_nvrtc_program.cpp: dlopen, compile, no
# kcache at all) where it is built beside the binary: the CPU floor that
# `KCACHE_DISABLE=1` itself sits above (no key derived: the larger binary's start).
plain=${KCACHE_PLAIN_NVRTC:-$(dirname "$kcache")/../bench/run_nvrtc_program}
# (It reads the same $work/src/trivial.cu: nothing is written into $work/src
# here, which would make the header scanner distrust that directory for 2 s.)
if [ -x "$plain" ]; then
  specs+=("$plain" "$work/src" "$cuda" trivial.cu ";")
fi
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  specs+=(KCACHE_DISABLE=1 "$KCACHE_BASELINE_BIN" compile "${cold_args[@]}" -o "$work/out/base-off.cubin" ";"
          "--prep=rm -rf $work/cold-base" "KCACHE_DIR=$work/cold-base" "$KCACHE_BASELINE_BIN" compile
          "${cold_args[@]}" -o "$work/out/base-on.cubin" ";")
fi
pairs=$work/cold-pairs
# The first cache-on compiles over a new source directory write its per-user
# header memos (compile/), which later processes distrust while they are
# younger than the racy window (2 s) and redo: 5-9 ms more each, for a few
# seconds. One compile and a pause first, then 5 rounds that are not counted.
KCACHE_DIR=$work/cold-warm "$kcache" compile "${cold_args[@]}" -o "$work/out/warm.cubin" >/dev/null
sleep 2.5
"$work/paired_runs" "$cold_runs" --warmup=5 "${specs[@]}" >"$pairs"
# Columns of $pairs: wall and CPU (us) of each spec, in the order above.
# summary OFF_WALL_COL ON_WALL_COL [OFF_LABEL ON_LABEL]: medians and the paired differences
# (ON minus OFF) with their quartiles and a 95 % bootstrap confidence interval of the
# median (bench/paired_summary.py): the interval, not the quartiles, says whether a
# median is known to be under a target.
summary() {
  python3 bench/paired_summary.py "$pairs" wall "$1" "$2" "${3:-cache off}" "${4:-cache on (empty dir)}"
}
KCACHE_DIR=$work/cold-du "$kcache" compile "${cold_args[@]}" -o "$work/out/du.cubin" >/dev/null
printf 'kcache cold trivial compile (%d rounds): %s' "$cold_runs" "$(summary 1 3)"
printf '; the one-entry directory: %s KiB (du)\n' "$(du -sk "$work/cold-du" | cut -f1)"
printf 'kcache (fsync=file) cold trivial compile (%d rounds): %s\n' "$cold_runs" "$(summary 1 5 "cache off" "cache on (empty dir, fsync=file)")"
next=7
if [ -x "$plain" ]; then
  printf 'against a plain NVRTC process (%d rounds), cache off: %s\n' "$cold_runs" "$(summary "$next" 1 "plain NVRTC" "cache off")"
  printf 'against a plain NVRTC process (%d rounds), cache on:  %s\n' "$cold_runs" "$(summary "$next" 3 "plain NVRTC")"
  next=$((next + 2))
fi
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  printf 'baseline cold trivial compile (%d rounds): %s\n' "$cold_runs" "$(summary "$next" $((next + 2)))"
fi

# A miss into a cache directory in use, a build's common case: the same
# directory every round and the source changed before each command (a comment
# appended to a copy in a directory of its own, so that the directories the
# header scanner checks do not change), against the same compile with the
# cache disabled; with KCACHE_BASELINE_BIN, that build's pair in the same rounds.
mkdir "$work/src-new"
cp "$work/src/trivial.cu" "$work/src-new/v.cu"
new_args=("$work/src-new/v.cu" --target cubin --arch sm_90)
edit="--prep=echo // \$\$ \$(date +%s%N) >> $work/src-new/v.cu"
specs=("$edit" KCACHE_DISABLE=1 "$kcache" compile "${new_args[@]}" -o "$work/out/new-off.cubin" ";"
       "$edit" "KCACHE_DIR=$work/in-use" "$kcache" compile "${new_args[@]}" -o "$work/out/new-on.cubin" ";")
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  specs+=("$edit" KCACHE_DISABLE=1 "$KCACHE_BASELINE_BIN" compile "${new_args[@]}" -o "$work/out/new-base-off.cubin" ";"
          "$edit" "KCACHE_DIR=$work/in-use-base" "$KCACHE_BASELINE_BIN" compile "${new_args[@]}"
          -o "$work/out/new-base-on.cubin" ";")
fi
KCACHE_DIR=$work/in-use "$kcache" compile "${new_args[@]}" -o "$work/out/in-use.cubin" >/dev/null
sleep 2.5
pairs=$work/in-use-pairs
"$work/paired_runs" "$cold_runs" --warmup=5 "${specs[@]}" >"$pairs"
printf 'kcache miss into a cache directory in use, a new source each round (%d rounds): %s\n' "$cold_runs" \
  "$(summary 1 3 "cache off" "cache on (directory in use)")"
if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
  printf 'baseline miss into a cache directory in use (%d rounds): %s\n' "$cold_runs" \
    "$(summary 5 7 "cache off" "cache on (directory in use)")"
fi
fi  # KCACHE_OFF_ONLY

# The cache turned off against the program's own compile: `KCACHE_DISABLE=1
# kcache compile` and a plain NVRTC process (no kcache at all) compiling the
# same file with the same options, paired rounds, the order rotated each
# round. With the cache off kcache derives no key (no header scanned or
# hashed), so the difference is the larger binary's start and the command
# line. Both outputs are compared byte for byte afterwards.
plain=${KCACHE_PLAIN_NVRTC:-$(dirname "$kcache")/../bench/run_nvrtc_program}
if [ -n "${KCACHE_OFF_ROUNDS:-}" ] && [ -x "$plain" ]; then
  printf '#include <cub/block/block_reduce.cuh>\nextern "C" __global__ void cccl_kernel(const int* in, int* out) {\n  using R = cub::BlockReduce<int, 128>;\n  __shared__ typename R::TempStorage t;\n  int s = R(t).Sum(in[threadIdx.x]);\n  if (threadIdx.x == 0) *out = s;\n}\n' >"$work/src/cccl.cu"
  declare -A plain_opts kcache_opts
  plain_opts[cccl]="-arch=sm_90 -I$cuda/include/cccl"
  kcache_opts[cccl]="--target cubin --arch sm_90 -I $cuda/include/cccl"
  kernels=(cccl)
  if [ -n "${KCACHE_BENCH_CUPY:-}" ]; then
    inc=$KCACHE_BENCH_CUPY
    printf '#include <cupy/carray.cuh>\nextern "C" __global__ void cupy_kernel(CArray<float, 1, true, true> x, CArray<float, 1, true, true> y) {\n  CUPY_FOR(i, y.size()) { y[i] = x[i] * 1.5f + 1.0f; }\n}\n' >"$work/src/cupy.cu"
    # CuPy's own options: C++17, its include directory, its bundled CCCL, the toolkit's.
    plain_opts[cupy]="-arch=sm_90 --std=c++17"
    kcache_opts[cupy]="--target cubin --arch sm_90 -X --std=c++17"
    for d in "$inc" "$inc/cupy/_cccl/cub" "$inc/cupy/_cccl/thrust" "$inc/cupy/_cccl/libcudacxx" "$cuda/include"; do
      plain_opts[cupy]+=" -I$d"
      kcache_opts[cupy]+=" -I $d"
    done
    kernels+=(cupy)
  fi
  off_specs=()
  for k in "${kernels[@]}"; do
    # shellcheck disable=SC2206  # the option lists are split on purpose (no spaces in the paths)
    off_specs+=("$plain" --compile "$work/src/$k.cu" "$work/out/$k-plain.cubin" ${plain_opts[$k]} ";"
                KCACHE_DISABLE=1 "$kcache" compile "$work/src/$k.cu" ${kcache_opts[$k]} -o "$work/out/$k-off.cubin" ";")
    if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
      # shellcheck disable=SC2206
      off_specs+=(KCACHE_DISABLE=1 "$KCACHE_BASELINE_BIN" compile "$work/src/$k.cu" ${kcache_opts[$k]}
                  -o "$work/out/$k-base-off.cubin" ";")
    fi
  done
  pairs=$work/off-pairs
  [ -x "$work/paired_runs" ] || cc -O2 -o "$work/paired_runs" bench/paired_runs.c
  "$work/paired_runs" "$KCACHE_OFF_ROUNDS" --warmup=1 "${off_specs[@]}" >"$pairs"
  col=1
  for k in "${kernels[@]}"; do
    same=$(cmp -s "$work/out/$k-plain.cubin" "$work/out/$k-off.cubin" && echo "same bytes" || echo "OTHER BYTES")
    printf 'KCACHE_DISABLE=1 against plain NVRTC, %s kernel (%d rounds, %s): %s\n' "$k" "$KCACHE_OFF_ROUNDS" "$same" \
      "$(python3 bench/paired_summary.py "$pairs" wall "$col" $((col + 2)) "plain NVRTC" "KCACHE_DISABLE=1")"
    if [ -n "${KCACHE_BASELINE_BIN:-}" ]; then
      printf 'baseline KCACHE_DISABLE=1 against plain NVRTC, %s kernel: %s\n' "$k" \
        "$(python3 bench/paired_summary.py "$pairs" wall "$col" $((col + 4)) "plain NVRTC" "baseline KCACHE_DISABLE=1")"
      col=$((col + 6))
    else
      col=$((col + 4))
    fi
  done
fi
