"""Benchmarks of kcache.jax (docs/jax.md, "Performance").

    .venv/bin/python bench/python/bench_jax.py [--quick] [--json out.json]

Real jax and jaxlib from PyPI, CPU backend; a real redis-server on 127.0.0.1 as
the team tier. Every figure is a median over interleaved rounds, with JAX's own
persistent file cache (jax_compilation_cache_dir, on the same machine) as the
baseline measured in the same run. Both sides store every compile
(jax_persistent_cache_min_compile_time_secs = 0).

1. Warm start on a fresh host: a new process that imports jax and runs K jit
   functions whose executables are cached. kcache: an empty cache directory
   (a fresh host) and a warm team tier (redis); JAX: its own file cache, warm,
   on this machine. Whole-process wall time (start to exit) and the time of
   the K calls; goal: kcache <= 1.05x JAX.
2. In-process get of a cached executable of 1 MiB and 50 MiB (a jit function
   with a constant of that size: the value JAX's cache is given): kcache's
   CacheInterface.get against JAX's LRUCache.get (its file cache) on the same
   bytes; kcache from the disk (a store opened per get: no memory tier) and
   from its memory tier (a repeated get in one process). Goal: no slower.
3. A herd of N processes (4 and 8) on one cold key, started together (each has
   imported jax, traced and lowered the function, and waits on a start file):
   wall time from the start until the last has its result, and XLA compiles
   counted, against one process compiling the same key alone; JAX's own cache
   beside it (every process compiles). Goal: 1 compile, wall <= 1.3x the
   single compile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ---- the child process ----------------------------------------------------------------------------


def _functions(k: int, salt: int, depth: int = 0):  # type: ignore[no-untyped-def]
    """K jit functions, distinct per `salt`; `depth` > 0 makes each take XLA longer to compile."""
    import jax
    import jax.numpy as jnp

    def make(i: int):  # type: ignore[no-untyped-def]
        def f(x):  # type: ignore[no-untyped-def]
            acc = x
            for j in range(1, depth or 4 + i % 3):
                m = jnp.reshape(jnp.arange(j * 3 + salt, dtype=x.dtype)[: j * 3], (j, 3)) / (j + i + 1)
                acc = acc + jnp.sum(jnp.tanh(m @ jnp.ones((3, 1), x.dtype)) * jnp.cos(acc[:1] + j))
            return acc * (i + 1)

        return jax.jit(f)

    return [make(i) for i in range(k)]


def child(mode: str, k: int, salt: int, go: str | None, depth: int = 0) -> None:
    """One process: import jax, turn on a cache (mode "kcache" or "jax"), run K functions; print JSON.

    With `go` (a herd), the functions are traced and lowered first, then the process says it
    is ready and waits for the start file: what runs after it is the compile (or the cache's
    answer) and the call."""
    start_unix = time.time()
    t0 = time.perf_counter()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np
    from jax._src import compiler

    t_jax = time.perf_counter()
    if mode == "kcache":
        import kcache.jax

        kcache.jax.install(min_compile_time_secs=0)
    else:
        jax.config.update("jax_compilation_cache_dir", os.environ["BENCH_JAX_CACHE"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    t_setup = time.perf_counter()
    compiles = [0]
    real = compiler.backend_compile_and_load

    def counting(*a, **kw):  # type: ignore[no-untyped-def]
        compiles[0] += 1
        return real(*a, **kw)

    compiler.backend_compile_and_load = counting
    fns = _functions(k, salt, depth)
    x = np.linspace(0.5, 2.0, 8).astype(np.float32)
    if go:
        lowered = [f.lower(x) for f in fns]
        Path(go + f".ready-{os.getpid()}").touch()
        while not os.path.exists(go):
            time.sleep(0.001)
        t_go = time.perf_counter()
        outs = [float(np.asarray(c(x)).sum()) for c in (lo.compile() for lo in lowered)]
    else:
        t_go = time.perf_counter()
        outs = [float(np.asarray(f(x)).sum()) for f in fns]
    t_done = time.perf_counter()
    done_unix = time.time()
    if mode == "kcache":
        import kcache

        s = kcache.default_store()
        if s is not None:
            s.flush()
    print(json.dumps({"start_unix": start_unix, "done_unix": done_unix, "import_jax_s": t_jax - t0,
                      "setup_s": t_setup - t_jax, "calls_s": t_done - t_go, "compiles": compiles[0], "outs": outs}))


def run_child(mode: str, k: int, salt: int, env: dict[str, str], go: str | None = None,
              depth: int = 0) -> subprocess.Popen:
    args = [sys.executable, str(HERE), "child", mode, str(k), str(salt), str(depth)]
    if go:
        args += ["--go", go]
    return subprocess.Popen(args, env={**os.environ, "JAX_PLATFORMS": "cpu", **env}, stdout=subprocess.PIPE,
                            text=True)


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({p.returncode})")
    return json.loads(out.strip().splitlines()[-1])


# ---- redis ----------------------------------------------------------------------------------------


def start_redis(work: Path) -> tuple[subprocess.Popen, int]:
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (scripts/bootstrap.sh)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                          "no", "--dir", str(work), "--protected-mode", "no", "--maxmemory", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return p, port
        except OSError:
            time.sleep(0.02)
    p.kill()
    raise SystemExit("redis-server did not start")


# ---- 1. warm start --------------------------------------------------------------------------------


def bench_warm_start(work: Path, redis: str, k: int, rounds: int) -> dict:
    envs = {"kcache": {"KCACHE_DIR": str(work / "ws-team"), "KCACHE_REMOTE": redis},
            "jax": {"BENCH_JAX_CACHE": str(work / "ws-jax")}}
    for mode, env in envs.items():  # fill the team tier (through another host's cache) and JAX's cache
        assert result(run_child(mode, k, 0, env))["compiles"] == k
    wall: dict[str, list[float]] = {m: [] for m in envs}
    calls: dict[str, list[float]] = {m: [] for m in envs}
    for r in range(rounds):
        for mode in ("kcache", "jax") if r % 2 == 0 else ("jax", "kcache"):
            env = dict(envs[mode])
            if mode == "kcache":
                env["KCACHE_DIR"] = str(work / f"ws-host-{r}")  # a fresh host: nothing local
            t = time.perf_counter()
            got = result(run_child(mode, k, 0, env))
            wall[mode].append(time.perf_counter() - t)
            calls[mode].append(got["calls_s"])
            assert got["compiles"] == 0, (mode, got)
    med = {m: statistics.median(v) for m, v in wall.items()}
    med_calls = {m: statistics.median(v) for m, v in calls.items()}
    return {"functions": k, "rounds": rounds, "process_s": med, "calls_s": med_calls,
            "process_ratio_kcache_over_jax": med["kcache"] / med["jax"],
            "calls_ratio_kcache_over_jax": med_calls["kcache"] / med_calls["jax"]}


# ---- 2. in-process get ----------------------------------------------------------------------------


def bench_get(work: Path, sizes_mib: list[int], reps: int) -> dict:
    import jax
    import numpy as np
    from jax._src.lru_cache import LRUCache

    import kcache
    import kcache.jax

    store = kcache.open_store(kcache.Config.load(cache_dir=work / "get-kcache", put="sync"))
    kcache.jax.install(store=store, min_compile_time_secs=0)
    out = {}
    for mib in sizes_mib:
        # A constant in the program is a constant in the executable; random floats compress to
        # about 0.9 of their size under JAX's zlib, so this makes an entry of about `mib` MiB.
        const = np.random.default_rng(mib).random(int(mib * (1 << 20) / 4 / 0.9), dtype=np.float32)
        known = {e.key for e in store.list()}
        jax.clear_caches()
        jax.jit(lambda x: x + const)(np.float32(1)).block_until_ready()
        (entry,) = [e for e in store.list() if e.kind == kcache.jax.KIND and e.key not in known]
        art = store.get(entry.key)
        jax_key = art.passport["labels"]["jax.key"]
        value = art.payload
        lru = LRUCache(str(work / f"get-jax-{mib}"), max_size=-1)
        lru.put(jax_key, value)
        backend = jax.devices()[0].client
        t = kcache.jax._thread_state()
        t.backend = backend
        interface = kcache.jax._interface_class()(str(work / "get-kcache"))
        samples: dict[str, list[float]] = {"jax_file": [], "kcache_first": [], "kcache_disk": [],
                                           "kcache_memory": []}
        disk = kcache.open_store(kcache.Config.load(cache_dir=work / "get-kcache", memory_size=0))
        for _ in range(reps):
            s0 = time.perf_counter()
            got = lru.get(jax_key)
            samples["jax_file"].append(time.perf_counter() - s0)
            assert got == value
            # The first read of a new process: a store just opened (its opening not timed).
            fresh = kcache.open_store(kcache.Config.load(cache_dir=work / "get-kcache", memory_size=0))
            kcache.jax._store = fresh
            s0 = time.perf_counter()
            got = interface.get(jax_key)
            samples["kcache_first"].append(time.perf_counter() - s0)
            assert got == value
            fresh.close()
            # Later reads from the disk (no memory tier), and from the memory tier.
            for name, st in (("kcache_disk", disk), ("kcache_memory", store)):
                kcache.jax._store = st
                interface.get(jax_key)
                s0 = time.perf_counter()
                got = interface.get(jax_key)
                samples[name].append(time.perf_counter() - s0)
                assert got == value
        kcache.jax._store = store
        disk.close()
        # What a program sees: a jit call whose executable is cached (trace, lower, key, get,
        # decompress, deserialize), with JAX's file cache and with kcache's (disk, warm check).
        from jax._src import compilation_cache as cc

        ours = cc._cache
        fn = jax.jit(lambda x: x + const)
        for _ in range(max(3, reps // 3)):
            for name, cache in (("jit_hit_jax_file", lru), ("jit_hit_kcache", ours)):
                cc._cache = cache
                jax.clear_caches()
                s0 = time.perf_counter()
                fn(np.float32(1)).block_until_ready()
                samples.setdefault(name, []).append(time.perf_counter() - s0)
        cc._cache = ours
        med = {m: statistics.median(v) * 1e3 for m, v in samples.items()}
        out[f"{mib}MiB"] = {"payload_bytes": len(value), "ms": med,
                            "ratio_kcache_over_jax": {m: med[m] / med["jax_file"] for m in med
                                                      if m.startswith("kcache")},
                            "jit_hit_ratio_kcache_over_jax": med["jit_hit_kcache"] / med["jit_hit_jax_file"]}
    kcache.jax.uninstall()
    store.close()
    return out


# ---- 3. herd --------------------------------------------------------------------------------------

_HERD_DEPTH = 12  # XLA takes a few seconds over it (most of a herd's wall is then the compile)


def bench_herd(work: Path, n: int, rounds: int) -> dict:
    single, herd, jax_herd = [], [], []
    compiles, jax_compiles = [], []

    def once(label: str, mode: str, count: int, salt: int) -> tuple[float, int]:
        cache = work / f"herd-{label}-{n}-{salt}"
        env = {"KCACHE_DIR": str(cache)} if mode == "kcache" else {"BENCH_JAX_CACHE": str(cache)}
        go = str(work / f"go-{label}-{n}-{salt}")
        procs = [run_child(mode, 1, salt, env, go, _HERD_DEPTH) for _ in range(count)]
        while len(list(work.glob(f"go-{label}-{n}-{salt}.ready-*"))) < count:
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a herd process died before the start signal")
            time.sleep(0.01)
        time.sleep(0.2)
        t = time.time()
        Path(go).touch()
        res = [result(p) for p in procs]
        return max(x["done_unix"] for x in res) - t, sum(x["compiles"] for x in res)

    for r in range(rounds):
        salt = 1000 + 10 * r + n  # a cold key per round
        w, c = once("single", "kcache", 1, salt)
        single.append(w)
        w, c = once("herd", "kcache", n, salt + 100000)
        herd.append(w)
        compiles.append(c)
        w, c = once("jax", "jax", n, salt + 200000)
        jax_herd.append(w)
        jax_compiles.append(c)
    s, h, j = statistics.median(single), statistics.median(herd), statistics.median(jax_herd)
    return {"processes": n, "rounds": rounds, "single_cold_s": s, "herd_cold_s": h, "ratio": h / s,
            "compiles": compiles, "jax_herd_cold_s": j, "jax_ratio": j / s, "jax_compiles": jax_compiles}


def main() -> None:
    if sys.argv[1:2] == ["child"]:  # bench_jax.py child MODE K SALT DEPTH [--go FILE]
        rest = sys.argv[2:]
        go = rest[rest.index("--go") + 1] if "--go" in rest else None
        child(rest[0], int(rest[1]), int(rest[2]), go, int(rest[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--json")
    ap.add_argument("--only", choices=["warm_start", "get", "herd"], action="append",
                    help="run only these sections (repeatable)")
    a = ap.parse_args()
    rounds = 3 if a.quick else 7
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-jax-"))
    redis, port = start_redis(work / "redis")
    out: dict = {"load_1min": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        only = set(a.only or ["warm_start", "get", "herd"])
        if "warm_start" in only:
            out["warm_start"] = bench_warm_start(work, f"redis://127.0.0.1:{port}", 8, rounds)
            print(json.dumps(out["warm_start"]), flush=True)
        if "get" in only:
            out["get"] = bench_get(work, [1, 50], 5 if a.quick else 15)
            print(json.dumps(out["get"]), flush=True)
        if "herd" in only:
            out["herd"] = [bench_herd(work, n, 2 if a.quick else 3) for n in (4, 8)]
            print(json.dumps(out["herd"]), flush=True)
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)
    out["load_1min_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
