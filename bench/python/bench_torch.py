"""Benchmarks of kcache.torch (docs/torch.md, "Figures").

    .venv/bin/python bench/python/bench_torch.py [--quick] [--rounds R] [--herds 4,8] [--json out.json]

Real torch from PyPI on CPU Inductor (TORCHINDUCTOR_COMPILE_THREADS=1 everywhere: no worker
pool, whose start would cost every variant the same), a small MLP compiled forward and
backward (its C++ kernels built by the host compiler), a local redis-server (Debian
``redis-server``) as the team tier. PyTorch's own Redis remote cache needs the ``redis`` PyPI
client (``.venv/bin/pip install redis``). Every figure is a median over interleaved rounds, each
process a new Python process; "first call" is the time of the compiled model's first forward
and backward in the process (what torch.compile costs it), "process" its whole wall time.

1. Warm start on a fresh host: empty TORCHINDUCTOR_CACHE_DIR, TMPDIR (Inductor's precompiled
   headers live there) and local kcache directory, the team tier warm:
     kcache_remote    kcache.torch (KCACHE_TORCH=1), KCACHE_REMOTE=redis://...
     torch_redis      PyTorch's Redis remote FX graph and AOTAutograd caches, the same server
   and the local warm starts:
     torch_local      PyTorch's own caches, its directories warm (its defaults: precompiled
                      headers on)
     kcache_local     kcache.torch, the kcache directory warm, a fresh Inductor directory
     kcache_warm_dir  kcache.torch, the kcache directory and the Inductor directory warm
   Goals: kcache_remote <= 1.05x torch_redis, <= 1.10x torch_local; kcache_local and
   kcache_warm_dir never slower than torch_local.
2. Herds: N processes (one kcache directory) compile the same cold model at the same moment;
   the CPU time of their first calls (the process and its host compiler children) summed,
   against one process compiling it alone. Goal: <= 1.2x. PyTorch alone (one shared
   TORCHINDUCTOR_CACHE_DIR) as the peer.
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


def child(go: str | None) -> None:
    """One process: compile the model, forward and backward; print one JSON line (the first
    call's wall and CPU time, the process's own and its host compiler children's)."""
    t_start = time.perf_counter()
    import resource

    import torch

    t_import = time.perf_counter()
    if os.environ.get("BENCH_INSTALL") == "1":
        import kcache.torch

        assert kcache.torch.install(), "kcache.torch did not install"
    if go:
        while not os.path.exists(go):
            time.sleep(0.002)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8))
    x = torch.randn(16, 32)
    compiled = torch.compile(model)

    def cpu() -> float:
        self_ = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime

    c0, t0 = cpu(), time.perf_counter()
    compiled(x).square().sum().backward()
    first_s, first_cpu = time.perf_counter() - t0, cpu() - c0
    from torch._dynamo.utils import counters

    kstats = sys.modules["kcache.torch"].stats() if "kcache.torch" in sys.modules else {}
    print(json.dumps({"first_s": first_s, "first_cpu_s": first_cpu, "import_s": t_import - t_start,
                      "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
                      "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
                      "kstats": kstats}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    def __init__(self, work: Path) -> None:
        self.port = free_port()
        work.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "KCACHE_", "TORCH_COMPILE"))}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    return env


def host(root: Path, **extra: str) -> dict[str, str]:
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    env = base_env()
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TMPDIR": str(root / "tmp"),
                "KCACHE_DIR": str(root / "kcache")})
    env.update(extra)
    return env


def start(env: dict[str, str], go: str | None = None) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, str(HERE), "--child"] + (["--go", go] if go else [])
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), time.perf_counter()


def finish(started: tuple[subprocess.Popen[str], float]) -> dict:
    p, t0 = started
    out, err = p.communicate(timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"child failed:\n{err[-3000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    r["process_s"] = wall
    return r


def run(env: dict[str, str]) -> dict:
    return finish(start(env))


def bench_warm(work: Path, redis: Redis, rounds: int) -> dict:
    url = f"redis://127.0.0.1:{redis.port}"
    torch_remote = {"TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
                    "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1", "TORCHINDUCTOR_REDIS_PORT": str(redis.port)}
    kc = {"KCACHE_TORCH": "1"}
    # Warm the team tier both ways, and the local caches both ways.
    cold = {"kcache": run(host(work / "seed-kcache", KCACHE_REMOTE=url, **kc)),
            "torch_redis": run(host(work / "seed-torch", **torch_remote))}
    run(host(work / "local-torch"))
    run(host(work / "local-kcache", **kc))
    shutil.rmtree(work / "local-kcache" / "inductor")
    run(host(work / "local-kcache", **kc))  # (twice: its Inductor directory warm for kcache_warm_dir)
    samples: dict[str, list[dict]] = {k: [] for k in
                                      ("kcache_remote", "torch_redis", "torch_local", "kcache_local", "kcache_warm_dir")}
    for r in range(rounds):
        order = list(samples)
        order = order[r % len(order):] + order[: r % len(order)]
        for name in order:
            fresh = work / f"r{r}-{name}"
            if name == "kcache_remote":
                env = host(fresh, KCACHE_REMOTE=url, **kc)
            elif name == "torch_redis":
                env = host(fresh, **torch_remote)
            elif name == "torch_local":
                env = host(work / "local-torch")
            elif name == "kcache_local":
                env = host(fresh, **kc)
                shutil.copytree(work / "local-kcache" / "kcache", fresh / "kcache")
            else:
                env = host(work / "local-kcache", **kc)
            samples[name].append(run(env))
            shutil.rmtree(fresh, ignore_errors=True)
    out: dict = {"cold_first_s": {k: v["first_s"] for k, v in cold.items()}}
    for name, runs in samples.items():
        out[name] = {"first_s": statistics.median(x["first_s"] for x in runs),
                     "first_cpu_s": statistics.median(x["first_cpu_s"] for x in runs),
                     "process_s": statistics.median(x["process_s"] for x in runs),
                     "fx_hit": runs[-1]["fx_hit"], "fx_miss": runs[-1]["fx_miss"], "kstats": runs[-1]["kstats"]}
    for a, b in (("kcache_remote", "torch_redis"), ("kcache_remote", "torch_local"), ("kcache_local", "torch_local"),
                 ("kcache_warm_dir", "torch_local")):
        out[f"{a}_over_{b}"] = {m: out[a][m] / out[b][m] for m in ("first_s", "first_cpu_s", "process_s")}
    return out


def bench_herd(work: Path, n: int, rounds: int) -> dict:
    kc = {"KCACHE_TORCH": "1"}
    alone, herd, peer = [], [], []
    for r in range(rounds):
        alone.append(run(host(work / f"alone-{n}-{r}", **kc))["first_cpu_s"])
        store = work / f"herd-{n}-{r}-kcache"
        go = work / f"go-{n}-{r}"
        procs = [start(host(work / f"herd-{n}-{r}-{i}", KCACHE_DIR=str(store), **kc), str(go)) for i in range(n)]
        time.sleep(2 + n)  # every process has imported torch and kcache
        go.touch()
        rs = [finish(p) for p in procs]
        herd.append({"cpu": sum(x["first_cpu_s"] for x in rs), "misses": sum(x["fx_miss"] for x in rs),
                     "each_cpu": sorted(round(x["first_cpu_s"], 2) for x in rs)})
        shared = work / f"peer-{n}-{r}"
        go = work / f"go-peer-{n}-{r}"
        procs = [start(host(work / f"peer-{n}-{r}-{i}", TORCHINDUCTOR_CACHE_DIR=str(shared / "inductor"),
                            TMPDIR=str(shared / "tmp")), str(go)) for i in range(n)]
        (shared / "tmp").mkdir(parents=True, exist_ok=True)
        time.sleep(2 + n)
        go.touch()
        rs = [finish(p) for p in procs]
        peer.append({"cpu": sum(x["first_cpu_s"] for x in rs), "misses": sum(x["fx_miss"] for x in rs)})
    one = statistics.median(alone)
    total = statistics.median(h["cpu"] for h in herd)
    torch_total = statistics.median(p["cpu"] for p in peer)
    return {"n": n, "one_compile_cpu_s": one, "herd_cpu_s": total, "herd_over_one": total / one,
            "herd_fx_misses": herd[-1]["misses"], "herd_each_cpu_s": herd[-1]["each_cpu"], "torch_herd_cpu_s": torch_total,
            "torch_herd_over_one": torch_total / one, "torch_herd_fx_misses": peer[-1]["misses"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--go")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--herds", default="4,8")
    ap.add_argument("--herd-rounds", type=int, help="rounds of each herd (default: --rounds)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.child:
        child(args.go)
        return
    try:
        import redis  # noqa: F401  (PyTorch's Redis remote cache needs it)
    except ImportError:
        raise SystemExit("PyTorch's Redis remote cache needs the redis client: .venv/bin/pip install redis") from None
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (scripts/bootstrap.sh)")
    rounds = 1 if args.quick else args.rounds
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-torch-"))
    redis = Redis(work / "redis")
    try:
        load = os.getloadavg()[0]
        result = {"torch": subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                          capture_output=True, text=True).stdout.strip(),
                  "cores": os.cpu_count(), "load_at_start": load, "rounds": rounds,
                  "warm_start": bench_warm(work, redis, rounds)}
        herd_rounds = 1 if args.quick else (args.herd_rounds or rounds)
        result["herds"] = [bench_herd(work, int(n), herd_rounds) for n in args.herds.split(",") if n]
        result["load_at_end"] = os.getloadavg()[0]
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
