#!/usr/bin/env bash
# The checks that need a GPU or many cores, run on a lent GPU machine (one
# H100 / H200, 16 cores, a CUDA toolkit and Python 3.12 with Triton, torch and
# CuPy; no kcache build dependencies, no network) from the tree that
# scripts/device-prepare.sh made here (.dev/). Results go to $OUT (default
# ./device-out): summary.txt holds every figure; one log per part.
#
#   scripts/device-check.sh PART...   (default: all of them, in this order)
#     gpu      GPU loader tests (C++), Python GPU tests (cuda.core drop-in,
#              Triton through kcache.triton, torch.compile through kcache.torch
#              and kcache.triton), `kcache run` of a CuPy program
#     herds    16 processes on one cold key: one cache directory, and 16
#              "hosts" with their own directories sharing one Redis
#     triton   bench/python/bench_triton.py (warm start, in-process, herd of 8)
#     costs    issue 23's process-start and miss-cost benchmarks
#   KCACHE_DEVICE_QUICK=1 runs the benchmarks with few rounds (a smoke test).
#
# The logs end up in $OUT/logs.tar (the device tool brings back 8 files).
#
# Every GPU test runs with KCACHE_REQUIRE_GPU=1 and KCACHE_REQUIRE_TOOLKIT=1:
# a missing driver, device or toolkit fails the test instead of skipping it.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dev=$root/.dev
out=${OUT:-$root/device-out}
mkdir -p "$out"
summary=$out/summary.txt
tmp=$(mktemp -d /tmp/kcache-device.XXXXXX)
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KCACHE_REQUIRE_GPU=1 KCACHE_REQUIRE_TOOLKIT=1
cuda=${CUDA_HOME:-/usr/local/cuda}
export CUDA_HOME=$cuda PATH=$dev/bin:$cuda/bin:$PATH

say() { echo "$*" | tee -a "$summary"; }
section() { say ""; say "== $1 ($(date -u +%T))"; }
# step NAME TIMEOUT_S CMD...: runs CMD with its output in NAME.log; says how it ended.
step() {
  local name=$1 limit=$2
  shift 2
  local s=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  say "-- $name: rc=$rc in $((SECONDS - s)) s"
  return $rc
}

# The binaries built here name the kcache command by its path in the build
# tree (KCACHE_CLI_PATH): make that path lead to the stripped copy.
ci_cli=$(cat "$dev/ci-cli-path")
if [ ! -x "$ci_cli" ]; then
  mkdir -p "$(dirname "$ci_cli")" && ln -sf "$dev/bin/kcache" "$ci_cli"
fi

probe() {
  section "machine"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "cores: $(nproc)"
    grep PRETTY_NAME /etc/os-release
    "$cuda/bin/nvcc" --version | tail -2
    python3 --version
    python3 -c 'import triton, torch; print("triton", triton.__version__, "torch", torch.__version__)'
    python3 -c 'import cupy; print("cupy", cupy.__version__)'
    uptime
  } 2>&1 | tee -a "$summary"
}

python_setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$dev"/whl/*.whl >"$out/pip.log" 2>&1 || { say "pip install of the wheels failed (pip.log)"; return 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}

gpu_checks() {
  section "GPU loader tests (C++)"
  step test_gpu 180 "$dev/bin/test_gpu" --gtest_color=no
  grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|tests ran' "$out/test_gpu.log" | tee -a "$summary"
  step test_load 120 "$dev/bin/test_load" --gtest_color=no
  grep -E '^\[ +(FAILED|SKIPPED|PASSED) +\]|tests ran' "$out/test_load.log" | tee -a "$summary"

  section "Python GPU tests (cuda.core drop-in, Triton on the device)"
  if python_setup; then
    (cd python/tests && KCACHE_CLI=$dev/bin/kcache step pytest_gpu 300 python3 -m pytest test_gpu.py \
      test_run_interpose_tempname.py -v -rs -p no:cacheprovider)
    grep -E 'PASSED|FAILED|SKIPPED|ERROR|passed|failed|^E ' "$out/pytest_gpu.log" | tail -16 | tee -a "$summary"

    # kcache.torch with Triton under Inductor: a new host compiles no Triton kernel, the static
    # launcher is used, outputs match (docs/torch.md). Whatever torch the machine has: a torch
    # outside kcache.torch.TESTED is tried anyway (KCACHE_TORCH_UNTESTED=1), and said so here.
    python3 -c 'import torch, kcache.torch as k; print("torch", torch.__version__, "tested:", k.TESTED)' 2>&1 |
      tee -a "$summary"
    (cd python/tests && KCACHE_TORCH_UNTESTED=1 step pytest_torch_gpu 600 python3 -m pytest test_torch_gpu.py \
      -v -rs -s -p no:cacheprovider)
    grep -E 'PASSED|FAILED|SKIPPED|ERROR|passed|failed|^E |autotune' "$out/pytest_torch_gpu.log" | tail -16 |
      tee -a "$summary"
  fi

  section "kcache run -- an unmodified CuPy program on the device"
  local prog='import cupy as cp
k = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 3 + 1", "kcache_dev_scale")
x = cp.arange(100000, dtype=cp.float32)
assert bool((k(x) == x * 3 + 1).all())
r = cp.RawKernel(r"""extern "C" __global__ void kcache_dev_add(float* p) { p[threadIdx.x] += 2; }""", "kcache_dev_add")
a = cp.zeros(64, dtype=cp.float32)
r((1,), (64,), (a,))
assert float(a.sum()) == 128.0
print("cupy results ok")'
  local i
  for i in 1 2; do  # a new CuPy cache each time: CuPy compiles again, kcache serves run 2
    CUPY_CACHE_DIR=$tmp/cupy-cache-$i KCACHE_DIR=$tmp/run-cache step "kcache_run_cupy_$i" 240 \
      kcache run -- python3 -c "$prog"
    tail -1 "$out/kcache_run_cupy_$i.log" | tee -a "$summary"
    KCACHE_DIR=$tmp/run-cache kcache stats 2>&1 | grep -i -E 'compiles|hits|entries' | tee -a "$summary"
  done
}

herds() {
  section "herd: 16 processes on one cold key, one cache directory (bench_pool)"
  step bench_pool_herd 180 "$dev/bin/bench_pool" --benchmark_filter='BM_SingleCompile|BM_Herd' \
    --benchmark_counters_tabular=true
  grep -E '^(BM_|Benchmark)' "$out/bench_pool_herd.log" | tee -a "$summary"

  section "cross-host herd: 16 hosts (own cache directories), one Redis, one cold key (bench_remote_lease)"
  local port=6399
  LD_LIBRARY_PATH=$dev/lib-redis "$dev/bin/redis-server" --port $port --bind 127.0.0.1 --save '' \
    --appendonly no >"$out/redis.log" 2>&1 &
  local redis=$!
  sleep 0.5
  KCACHE_BENCH_REDIS=redis://127.0.0.1:$port step bench_remote_lease 240 "$dev/bin/bench_remote_lease" \
    --benchmark_counters_tabular=true
  grep -E '^(cold|herd|new_host|local|Benchmark)' "$out/bench_remote_lease.log" | tee -a "$summary"
  kill "$redis" 2>/dev/null
  wait "$redis" 2>/dev/null
}

triton_bench() {
  section "Triton: warm start, in-process warm compile, herd of 8 (bench/python/bench_triton.py)"
  python_setup || return
  step bench_triton 300 python3 bench/python/bench_triton.py --json "$out/bench_triton.json"
  tail -40 "$out/bench_triton.log" | grep -E 'ratio|_s"|compiles' | tee -a "$summary"
}

costs() {
  section "issue 23: whole-process hit vs /bin/true and ccache+nvcc; cold CLI overhead"
  command -v cc >/dev/null || say "no cc: the libc-only hello is skipped"
  export CCACHE_NOHASHDIR=1
  local args=(20 9 30) miss=(3 50)
  [ "${KCACHE_DEVICE_QUICK:-0}" = 1 ] && args=(3 1 2) miss=(1 5)
  KCACHE_BIN=$dev/bin/kcache step process_start 240 scripts/bench-process-start.sh "${args[@]}"
  grep -v '^$' "$out/process_start.log" | tail -20 | tee -a "$summary"

  section "issue 23: whole-process hit over 700 headers vs no header"
  step header_hit 120 scripts/bench-header-hit.sh 20 5 "$dev/bin/kcache"
  tail -3 "$out/header_hit.log" | tee -a "$summary"

  section "issue 23: miss cost against plain NVRTC (CuPy's headers from the machine's CuPy, CCCL, corpus)"
  local cupy_inc
  cupy_inc=$(python3 -c 'import cupy, os; print(os.path.join(os.path.dirname(cupy.__file__), "_core", "include"))')
  KCACHE_BENCH_CUPY=$cupy_inc step bench_miss 300 "$dev/bin/bench_miss" "${miss[@]}"
  grep -v '^$' "$out/bench_miss.log" | tail -24 | tee -a "$summary"

  section "issue 23: what a header stat costs here, and on 1-16 threads (bench/stat_floor.c)"
  if cc -O2 -pthread -o "$out/stat_floor" bench/stat_floor.c; then
    find "$cupy_inc" -type f | sort > "$out/cupy_headers.txt"
    step stat_floor 120 "$out/stat_floor" "$out/cupy_headers.txt" 30 16
    tail -2 "$out/stat_floor.log" | tee -a "$summary"
  fi
}

probe
[ $# -eq 0 ] && set -- gpu herds triton costs
for part in "$@"; do
  case $part in
    gpu) gpu_checks ;;
    herds) herds ;;
    triton) triton_bench ;;
    costs) costs ;;
    *) say "unknown part '$part' (gpu, herds, triton, costs)"; exit 2 ;;
  esac
done
section "done"
(cd "$out" && tar cf logs.tar -- *.log && rm -f -- *.log)
rm -rf "$tmp"
