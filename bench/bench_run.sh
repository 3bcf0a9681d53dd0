#!/usr/bin/env bash
# bench/bench_run.sh: what `kcache run` costs and saves (docs/performance.md, "kcache run").
#
#   cmake --build --preset ci --target kcache_cli run_nvrtc_program
#   bench/bench_run.sh [BUILD_DIR] [PROCESSES]
#
# 1. An NVRTC program (bench/run_nvrtc_program.cpp) compiles the bench corpus
#    (trivial, medium, CUB) once per process, PROCESSES times in each mode:
#    without kcache, cold under `kcache run` (a cache emptied with `kcache
#    clear` before each process: no entries, the machine's toolkit and header
#    memos kept) and warm under `kcache run` (a cache that holds every
#    kernel). Per kernel: the median wall and CPU time of its compile calls;
#    ratios against "without kcache". "first_ever_us": the one run in a brand
#    new cache directory (memos made too).
# 2. A program that compiles nothing (/bin/true), 200 times each: plain, with
#    only the stand-in preloaded (the environment route), and under
#    `kcache run`, in turns. CPU time (user + system, which machine load does
#    not inflate) and wall time, medians.
# Prints one JSON object.
set -euo pipefail
build=${1:-build/ci}
processes=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
k="$build/bin/kcache"
prog="$build/bench/run_nvrtc_program"
lib="$build/lib/kcache/libkcache-interpose.so"
home=${KCACHE_CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-bench-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
export -n KCACHE_DIR KCACHE_DISABLE KCACHE_REMOTE 2>/dev/null || true
python3 - "$k" "$prog" "$lib" "$home" "$root/bench/corpus" "$work" "$processes" <<'PY'
import json, os, resource, statistics, subprocess, sys, time
k, prog, lib, home, corpus, work, processes = sys.argv[1:8]
processes = int(processes)
base = dict(os.environ)

def compile_times(prefix, env):
    out = subprocess.run(prefix + [prog, corpus, home], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)

modes = {"no_kcache": [], "cold": [], "warm": []}
warm_dir = os.path.join(work, "warm")
cold_dir = os.path.join(work, "cold")
first = compile_times([k, "run", "--"], dict(base, KCACHE_DIR=warm_dir))
for i in range(processes):
    modes["no_kcache"].append(compile_times([], base))
    subprocess.run([k, "clear"], env=dict(base, KCACHE_DIR=cold_dir), check=True, capture_output=True)
    modes["cold"].append(compile_times([k, "run", "--"], dict(base, KCACHE_DIR=cold_dir)))
    modes["warm"].append(compile_times([k, "run", "--"], dict(base, KCACHE_DIR=warm_dir)))
result = {"processes": processes, "kernels": {}}
for kernel in [n for n in modes["no_kcache"][0] if not n.endswith("/cpu")]:
    row = {"first_ever_us": first[kernel]}
    for suffix, unit in (("", "us"), ("/cpu", "cpu_us")):
        med = {m: statistics.median(r[kernel + suffix] for r in runs) for m, runs in modes.items()}
        row.update({"no_kcache_" + unit: med["no_kcache"], "cold_" + unit: med["cold"], "warm_" + unit: med["warm"],
                    "warm_speedup" + suffix.replace("/", "_"): round(med["no_kcache"] / max(med["warm"], 1), 1),
                    "cold_vs_no_kcache_pct" + suffix.replace("/", "_"):
                        round(100.0 * (med["cold"] - med["no_kcache"]) / med["no_kcache"], 2)})
    result["kernels"][kernel] = row

def start_costs(runs, n=200):
    """CPU and wall medians (ms) of each (cmd, env) in `runs`, taken in turns so that a change
    of the machine's load during the measurement touches each alike."""
    cpu = [[] for _ in runs]
    wall = [[] for _ in runs]
    for _ in range(n):
        for i, (cmd, env) in enumerate(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(cmd, env=env, check=True)
            wall[i].append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[i].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return [(statistics.median(c) * 1000, statistics.median(w) * 1000) for c, w in zip(cpu, wall)]

if not os.path.isfile(lib):
    sys.exit(f"bench_run: the stand-in {lib} is missing (build kcache_interpose)")
plain, preload, wrapped = start_costs([(["/bin/true"], base), (["/bin/true"], dict(base, LD_PRELOAD=lib)),
                                       ([k, "run", "--", "/bin/true"], dict(base, KCACHE_DIR=warm_dir))])
result["nothing_compiled_ms"] = {
    "plain_cpu": round(plain[0], 3), "plain_wall": round(plain[1], 3),
    "preload_only_extra_cpu": round(preload[0] - plain[0], 3), "preload_only_extra_wall": round(preload[1] - plain[1], 3),
    "kcache_run_extra_cpu": round(wrapped[0] - plain[0], 3), "kcache_run_extra_wall": round(wrapped[1] - plain[1], 3)}
result["load_average"] = os.getloadavg()[0]
print(json.dumps(result, indent=2))
PY
