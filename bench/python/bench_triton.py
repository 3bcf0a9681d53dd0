"""Benchmarks of kcache.triton (docs/performance.md, "Triton").

    .venv/bin/python bench/python/bench_triton.py [--quick] [--json out.json]

Real Triton from PyPI compiling for an explicit target (GPUTarget("cuda", 90,
32), ptxas from the wheel; no GPU). Every figure is a median over interleaved
rounds, with Triton's own cache (FileCacheManager in a TRITON_CACHE_DIR) as the
baseline measured in the same run.

1. Warm start: a new Python process that imports Triton and compiles K cached
   kernels, with kcache.triton.install() (cache and triton_key() memo warm)
   against Triton's default cache (warm). Whole-process wall time, and inside
   the process the time of the K compiles (the lookups) and of triton_key().
2. In-process warm triton.compile() of a cached kernel: kcache against
   Triton's default cache, per call.
3. A herd of 8 processes that compile one cold key at the same moment through
   kcache: wall time from the start signal until the last has its kernel,
   against one process compiling the same cold key alone; compiles counted.
   Every process has imported Triton, computed triton_key() and started its
   backend before the signal.
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
    """One process: import, install (mode "kcache") or not ("triton"), compile `variants`."""
    t0 = time.perf_counter()
    if mode == "kcache":
        import kcache.triton

        kcache.triton.install()
    triton, source, target = _kernels()
    import triton.runtime.cache as tc

    compiles = []
    triton.knobs.compilation.listener = lambda **kw: compiles.append(not kw["cache_hit"])
    # The lookups themselves: the time inside the active manager's get_group.
    manager = triton.knobs.cache.manager_class or tc.FileCacheManager
    lookup_s = [0.0]
    real_get_group = manager.get_group

    def timed_get_group(self, filename):
        t = time.perf_counter()
        try:
            return real_get_group(self, filename)
        finally:
            lookup_s[0] += time.perf_counter() - t

    manager.get_group = timed_get_group
    t1 = time.perf_counter()
    tc.triton_key()
    t2 = time.perf_counter()
    if go is not None:
        # A process of a herd has started Triton's backend (two `ptxas --version` runs) before
        # the signal, in the herd and in its one-process baseline alike: the figure is the
        # compile and the waits, not eight process starts on two cores.
        from triton.compiler.compiler import make_backend

        make_backend(target).hash()
    while go is not None and not os.path.exists(go):
        time.sleep(0.001)
    t3 = time.perf_counter()
    for v in variants:
        triton.compile(source(v), target=target)
    t4 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "triton_key_s": t2 - t1, "compile_s": t4 - t3, "lookup_s": lookup_s[0],
                      "compiles": sum(compiles), "done_unix": time.time()}), flush=True)


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


def bench_warm_start(work: Path, k: int, rounds: int) -> dict:
    variants = list(range(k))
    envs = {"kcache": {"KCACHE_DIR": str(work / "ws-kcache")},
            "triton": {"TRITON_CACHE_DIR": str(work / "ws-triton")}}
    for mode, env in envs.items():  # fill both caches (and kcache's triton_key memo)
        result(run_child(mode, variants, env))
    wall: dict[str, list[float]] = {m: [] for m in envs}
    inner: dict[str, list[dict]] = {m: [] for m in envs}
    for _ in range(rounds):
        for mode, env in envs.items():
            t = time.perf_counter()
            r = result(run_child(mode, variants, env))
            wall[mode].append(time.perf_counter() - t)
            assert r["compiles"] == 0, (mode, r)
            inner[mode].append(r)
    med = {m: statistics.median(v) for m, v in wall.items()}
    part = {m: {f: statistics.median(x[f] for x in inner[m]) for f in ("import_s", "triton_key_s", "compile_s", "lookup_s")}
            for m in envs}
    return {"kernels": k, "rounds": rounds, "process_s": med, "inside": part,
            "process_ratio": med["triton"] / med["kcache"]}


def bench_in_process(work: Path, reps: int, rounds: int) -> dict:
    """Calls alternate between the two managers one by one (knobs.cache.manager_class), so that a
    machine whose load drifts shifts both alike; the medians of all calls are compared."""
    import kcache
    import kcache.triton

    triton, source, target = _kernels()
    from triton import knobs
    from triton.runtime.cache import get_cache_manager

    src = source(0)
    os.environ["TRITON_CACHE_DIR"] = str(work / "ip-triton")
    store = kcache.open_store(kcache.Config.load(cache_dir=work / "ip-kcache"))
    kcache.triton.install(store=store)
    managers = {"kcache": knobs.cache.manager_class, "triton": None}
    key_hash = ""
    for cls in managers.values():  # fill both caches
        knobs.cache.manager_class = cls
        key_hash = triton.compile(src, target=target).hash
    name = f"{src.name}.json"

    def compile_once() -> None:
        triton.compile(src, target=target)

    def lookup() -> None:  # what Triton's compile() asks of the cache on a hit
        assert get_cache_manager(key_hash).get_group(name) is not None

    samples: dict[str, dict[str, list[float]]] = {m: {"compile": [], "lookup": []} for m in managers}
    for _ in range(reps * rounds):
        for mode, cls in managers.items():
            knobs.cache.manager_class = cls
            for what, fn in (("compile", compile_once), ("lookup", lookup)):
                t = time.perf_counter_ns()
                fn()
                samples[mode][what].append((time.perf_counter_ns() - t) / 1e3)
    kcache.triton.uninstall()
    store.close()
    med = {m: statistics.median(v["compile"]) for m, v in samples.items()}
    lk = {m: statistics.median(v["lookup"]) for m, v in samples.items()}
    return {"per_call_us": med, "ratio_triton_over_kcache": med["triton"] / med["kcache"],
            "lookup_us": lk, "lookup_ratio_triton_over_kcache": lk["triton"] / lk["kcache"]}


def bench_herd(work: Path, n: int, rounds: int) -> dict:
    single, herd, compiles = [], [], []
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
            time.sleep(3.0)  # all have imported Triton and wait for the signal
            t = time.time()
            Path(go).touch()
            res = [result(p) for p in procs]
            wall = max(x["done_unix"] for x in res) - t
            (single if label == "single" else herd).append(wall)
            if label == "herd":
                compiles.append(sum(x["compiles"] for x in res))
    s, h = statistics.median(single), statistics.median(herd)
    return {"processes": n, "single_cold_s": s, "herd_cold_s": h, "ratio": h / s, "compiles": compiles}


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
