"""Benchmarks of kcache.triton (docs/performance.md, "Triton").

    .venv/bin/python bench/python/bench_triton.py [--quick] [--json out.json]

Real Triton from PyPI compiling for an explicit target (GPUTarget("cuda", 90,
32), ptxas from the wheel; no GPU). Every figure is a median over interleaved
rounds, with Triton's own cache (FileCacheManager in a TRITON_CACHE_DIR) as the
baseline measured in the same run.

1. Warm start: a new Python process that imports Triton and compiles K cached
   kernels, with kcache.triton.install() (cache and triton_key() memo warm)
   against Triton's default cache (warm). Whole-process wall and CPU time, and
   where the time went: the interpreter's start and exit, `import triton`,
   kcache's import and install(), triton_key(), the backend's start, the K
   compiles and the lookups within them ("kcache_own_s" sums kcache's part).
2. In-process warm triton.compile() of a cached kernel: kcache against
   Triton's default cache, per call, in a shuffled order.
3. A herd of 8 processes that compile one cold key at the same moment through
   kcache: wall and CPU time from the start signal until the last has its
   kernel, against one process compiling the same cold key alone; compiles
   counted. Every process has imported Triton, computed triton_key() and
   started its backend before the signal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def _kernels():  # imported in the child processes and in-process section only
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

    def source(variant: int):
        return ASTSource(
            fn=matmul,
            signature={"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
            constexprs={"BM": 64, "BN": 64 << (variant % 2), "BK": 32 << (variant // 2)},
        )

    return triton, source, GPUTarget("cuda", 90, 32)


def child(mode: str, variants: list[int], go: str | None) -> None:
    """One process: import, install (mode "kcache") or not ("triton"), compile `variants`.

    Reports where its time went: the wall clock at its first line and at its end (the
    parent adds the interpreter's start and exit around them), `import triton`, kcache's
    import and install(), triton_key(), the backend's start (`ptxas --version`), the
    compiles, and within them the time in the cache manager's get_group (the lookups).
    """
    start_unix = time.time()
    cpu = {"interpreter_start_s": time.process_time()}  # CPU time of the process so far, at each mark
    t0 = time.perf_counter()
    import triton  # what every Triton program pays, with or without kcache

    t_triton = time.perf_counter()
    cpu["import_triton_s"] = time.process_time()
    if mode == "kcache":
        import kcache.triton

        kcache.triton.install()
    t_kcache = time.perf_counter()
    cpu["kcache_setup_s"] = time.process_time()
    triton, source, target = _kernels()
    import triton.runtime.cache as tc

    compiles = []
    triton.knobs.compilation.listener = lambda **kw: compiles.append(not kw["cache_hit"])
    # The lookups themselves: the time inside the active manager's get_group.
    manager = triton.knobs.cache.manager_class or tc.FileCacheManager
    lookup_s = [0.0, 0.0]  # wall, CPU
    real_get_group = manager.get_group

    def timed_get_group(self, filename):
        t = time.perf_counter()
        c = time.process_time()
        try:
            return real_get_group(self, filename)
        finally:
            lookup_s[0] += time.perf_counter() - t
            lookup_s[1] += time.process_time() - c

    manager.get_group = timed_get_group
    t1 = time.perf_counter()
    cpu["kernels_s"] = time.process_time()
    tc.triton_key()
    t2 = time.perf_counter()
    cpu["triton_key_s"] = time.process_time()
    # Triton's backend starts (two `ptxas --version` runs) in the first compile; timed apart.
    from triton.compiler.compiler import make_backend

    make_backend(target).hash()
    t_backend = time.perf_counter()
    cpu["backend_s"] = time.process_time()
    if go is not None:
        open(f"{go}.ready-{os.getpid()}", "w").close()
    while go is not None and not os.path.exists(go):
        time.sleep(0.001)
    t3 = time.perf_counter()
    c3 = time.process_time()
    k3 = _cpu_of_children()  # ptxas, which a compile runs as a child process
    for v in variants:
        triton.compile(source(v), target=target)
    t4 = time.perf_counter()
    cpu_compile = time.process_time() - c3
    cpu_tools = _cpu_of_children() - k3
    cpu["compile_s"] = cpu["backend_s"] + cpu_compile
    marks = list(cpu.items())  # cumulative: each segment is the difference from the mark before
    cpu_parts = {name: value - (marks[i - 1][1] if i else 0.0) for i, (name, value) in enumerate(marks)}
    cpu_parts["lookup_s"] = lookup_s[1]
    print(json.dumps({"start_unix": start_unix, "import_triton_s": t_triton - t0, "kcache_setup_s": t_kcache - t_triton,
                      "kernels_s": t1 - t_kcache, "triton_key_s": t2 - t1, "backend_s": t_backend - t2,
                      "compile_s": t4 - t3, "lookup_s": lookup_s[0], "cpu": cpu_parts, "in_process_s": t4 - t0 - (t3 - t_backend),
                      "compile_cpu_s": cpu_compile + cpu_tools, "compiles": sum(compiles), "done_unix": time.time()}), flush=True)


def run_child(mode: str, variants: list[int], env: dict[str, str], go: str | None = None) -> subprocess.Popen:
    args = [sys.executable, str(HERE), "child", mode, ",".join(map(str, variants))]
    if go:
        args += ["--go", go]
    return subprocess.Popen(args, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def _cpu_of_children() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_warm_start(work: Path, k: int, rounds: int) -> dict:
    variants = list(range(k))
    envs = {"kcache": {"KCACHE_DIR": str(work / "ws-kcache")},
            "triton": {"TRITON_CACHE_DIR": str(work / "ws-triton")}}
    for mode, env in envs.items():  # fill both caches (and kcache's triton_key memo)
        result(run_child(mode, variants, env))
    wall: dict[str, list[float]] = {m: [] for m in envs}
    cpu: dict[str, list[float]] = {m: [] for m in envs}
    inner: dict[str, list[dict]] = {m: [] for m in envs}
    for _ in range(rounds):
        for mode, env in envs.items():
            c = _cpu_of_children()
            t_unix = time.time()
            t = time.perf_counter()
            r = result(run_child(mode, variants, env))
            wall[mode].append(time.perf_counter() - t)
            cpu[mode].append(_cpu_of_children() - c)
            end_unix = time.time()
            assert r["compiles"] == 0, (mode, r)
            r["interpreter_start_s"] = r["start_unix"] - t_unix  # fork, exec, Python and site
            r["exit_s"] = end_unix - r["done_unix"]  # atexit handlers, interpreter teardown
            inner[mode].append(r)
    med = {m: statistics.median(v) for m, v in wall.items()}
    fields = ("interpreter_start_s", "import_triton_s", "kcache_setup_s", "kernels_s", "triton_key_s", "backend_s",
              "compile_s", "lookup_s", "exit_s")
    part = {m: {f: statistics.median(x[f] for x in inner[m]) for f in fields} for m in envs}
    part_cpu = {m: {f: statistics.median(x["cpu"][f] for x in inner[m]) for f in inner[m][0]["cpu"]} for m in envs}
    own = part["kcache"]
    own_cpu = part_cpu["kcache"]
    # kcache's own work in its process: import kcache + install(), the memoized triton_key()
    # and the lookups (the memoized `ptxas --version` is inside backend_s, with Triton's own).
    kcache_own = own["kcache_setup_s"] + own["triton_key_s"] + own["lookup_s"]
    return {"kernels": k, "rounds": rounds, "process_s": med, "cpu_s": {m: statistics.median(v) for m, v in cpu.items()},
            "inside": part, "inside_cpu": part_cpu, "kcache_own_s": kcache_own,
            "kcache_own_cpu_s": own_cpu["kcache_setup_s"] + own_cpu["triton_key_s"] + own_cpu["lookup_s"],
            "process_ratio": med["triton"] / med["kcache"],
            "cpu_ratio": statistics.median(cpu["triton"]) / statistics.median(cpu["kcache"]),
            "floor_s": own["interpreter_start_s"] + own["import_triton_s"] + own["exit_s"]}


def bench_in_process(work: Path, reps: int, rounds: int) -> dict:
    """Calls alternate between the two managers (knobs.cache.manager_class) in a shuffled order
    each time (a fixed order favoured one side by some microseconds, through the caches of the
    CPU), so that a machine whose load drifts shifts both alike; the medians of all calls are
    compared. The lookup is the time inside the manager's get_group during those calls."""
    import random

    import kcache
    import kcache.triton

    triton, source, target = _kernels()
    from triton import knobs
    from triton.runtime.cache import FileCacheManager

    src = source(0)
    os.environ["TRITON_CACHE_DIR"] = str(work / "ip-triton")
    store = kcache.open_store(kcache.Config.load(cache_dir=work / "ip-kcache"))
    kcache.triton.install(store=store)
    managers = {"kcache": knobs.cache.manager_class, "triton": None}
    inside = [0]
    for cls in (knobs.cache.manager_class, FileCacheManager):
        real = cls.get_group

        def timed(self, filename, real=real):
            t = time.perf_counter_ns()
            try:
                return real(self, filename)
            finally:
                inside[0] += time.perf_counter_ns() - t

        cls.get_group = timed
    for cls in managers.values():  # fill both caches
        knobs.cache.manager_class = cls
        triton.compile(src, target=target)

    rng = random.Random(19)
    order = list(managers.items())
    samples: dict[str, dict[str, list[float]]] = {m: {"compile": [], "lookup": []} for m in managers}
    for _ in range(reps * rounds):
        rng.shuffle(order)
        for mode, cls in order:
            knobs.cache.manager_class = cls
            inside[0] = 0
            t = time.perf_counter_ns()
            triton.compile(src, target=target)
            samples[mode]["compile"].append((time.perf_counter_ns() - t) / 1e3)
            samples[mode]["lookup"].append(inside[0] / 1e3)
    kcache.triton.uninstall()
    store.close()
    med = {m: statistics.median(v["compile"]) for m, v in samples.items()}
    lk = {m: statistics.median(v["lookup"]) for m, v in samples.items()}
    return {"per_call_us": med, "ratio_triton_over_kcache": med["triton"] / med["kcache"],
            "lookup_us": lk, "lookup_ratio_triton_over_kcache": lk["triton"] / lk["kcache"]}


def bench_herd(work: Path, n: int, rounds: int) -> dict:
    """Every process has imported Triton, computed triton_key() and started its backend, and
    says so (a ready file) before the start signal; the wall time runs from the signal until
    the last process has its kernel. CPU: user + system time of all the processes between
    the signal and their kernel, with the ptxas processes they ran, against the one process
    alone."""
    single, herd, compiles, cpu_single, cpu_herd = [], [], [], [], []
    # Warm the triton_key() memo so that every process starts alike.
    result(run_child("kcache", [0], {"KCACHE_DIR": str(work / "herd-memo")}))
    for r in range(rounds):
        for label, count in (("single", 1), ("herd", n)):
            cache = work / f"herd-{label}-{r}"
            # The memo file is per cache directory: copy the warm one in.
            os.makedirs(cache / "v1" / "triton", exist_ok=True)
            for f in (work / "herd-memo" / "v1" / "triton").glob("key-*.json"):
                (cache / "v1" / "triton" / f.name).write_bytes(f.read_bytes())
            go = str(work / f"go-{label}-{r}")
            procs = [run_child("kcache", [5], {"KCACHE_DIR": str(cache)}, go) for _ in range(count)]
            while len(list(work.glob(f"go-{label}-{r}.ready-*"))) < count:
                assert all(p.poll() is None for p in procs), "a herd process died before the signal"
                time.sleep(0.01)
            time.sleep(0.2)  # the last one is in its wait loop
            t = time.time()
            Path(go).touch()
            res = [result(p) for p in procs]
            wall = max(x["done_unix"] for x in res) - t
            cpu = sum(x["compile_cpu_s"] for x in res)
            (single if label == "single" else herd).append(wall)
            (cpu_single if label == "single" else cpu_herd).append(cpu)
            if label == "herd":
                compiles.append(sum(x["compiles"] for x in res))
    s, h = statistics.median(single), statistics.median(herd)
    cs, ch = statistics.median(cpu_single), statistics.median(cpu_herd)
    return {"processes": n, "single_cold_s": s, "herd_cold_s": h, "ratio": h / s, "compiles": compiles,
            "single_cpu_s": cs, "herd_cpu_s": ch, "cpu_ratio": ch / cs,
            "herd_cpu_per_waiter_s": (ch - cs) / (n - 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-triton-"))
    os.environ["KCACHE_DIR"] = str(work / "kcache")
    os.environ["XDG_CONFIG_HOME"] = str(work / "config")
    out = {
        "warm_start": bench_warm_start(work, 4, 3 if a.quick else 7),
        "in_process": bench_in_process(work, 20 if a.quick else 100, 3 if a.quick else 7),
        "herd": bench_herd(work, 8, 1 if a.quick else 3),
    }
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        argv = sys.argv[2:]
        go = argv[argv.index("--go") + 1] if "--go" in argv else None
        child(argv[0], [int(v) for v in argv[1].split(",")], go)
    else:
        main()
