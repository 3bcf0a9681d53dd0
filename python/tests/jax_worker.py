"""A JAX process for python/tests/test_jax*.py and bench/python/bench_jax.py.

Run as a script, it imports real jax (CPU backend), turns kcache.jax on (or
not), jit-compiles one function per --case and prints one JSON line:

  {"installed": bool, "cases": [{"case", "result", "xla_compiles", "jax_hits", "jax_misses",
   "jax_hit_logs", "jax_miss_logs"}], "stats": kcache.jax.stats(), "store": Store.stats(),
   "seconds": wall seconds of the cases}

  jax_worker.py [--case small:f32:8 ...] [--go FILE] [--ready FILE] [--no-install] [--min-compile S]
                [--process-id N] [--hold-compile FILE] [--jax-cache DIR]

  --case FN:DTYPE:N   compile FN ("small", "slow": XLA takes longer (tenths of a second), "callback": a host
                      callback) on an array of N DTYPE ("f32", "i32"); default small:f32:8
  --go FILE           wait until FILE exists before the first compile (a herd starts together)
  --ready FILE        create FILE once jax is imported and kcache.jax is on
  --no-install        do not call kcache.jax.install() (KCACHE_JAX=1 may still turn it on)
  --min-compile S     install(min_compile_time_secs=S) (default 0: store every compile)
  --process-id N      this process's jax.distributed process id, as JAX reads it
  --hold-compile FILE at its first XLA compile (holding the key), create FILE and sleep: the test
                      SIGKILLs this process
  --jax-cache DIR     JAX's own file cache in DIR instead of kcache (a baseline)

Python warnings are printed to stderr as one line each, "PYWARN <category>: <message>".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    print(f"PYWARN {category.__name__}: {' '.join(str(message).split())}", file=sys.stderr, flush=True)


warnings.showwarning = _show
warnings.simplefilter("always")


def make_fn(name: str):  # type: ignore[no-untyped-def]
    import jax
    import jax.numpy as jnp

    if name == "small":
        return jax.jit(lambda x: jnp.sin(x) * 2 + jnp.sum(x))
    if name == "slow":
        # Many small matmuls of distinct shapes that XLA cannot fuse into one.
        def slow(x):  # type: ignore[no-untyped-def]
            acc = x
            for i in range(1, 7):
                m = jnp.reshape(jnp.arange(i * 3, dtype=x.dtype), (i, 3)) / (i + 1)
                acc = acc + jnp.sum(jnp.tanh(m @ jnp.ones((3, 1), x.dtype)) * jnp.cos(acc[: 1] + i))
            return acc

        return jax.jit(slow)
    if name == "callback":
        def with_callback(x):  # type: ignore[no-untyped-def]
            jax.debug.callback(lambda v: None, x)
            return x * 3

        return jax.jit(with_callback)
    raise SystemExit(f"unknown case function {name!r}")


class Events:
    """JAX's own account of the persistent cache: monitoring events and log lines."""

    def __init__(self) -> None:
        import jax.monitoring

        self.counts: dict[str, int] = {}
        self.logs: list[str] = []
        jax.monitoring.register_event_listener(self._event)
        handler = logging.Handler(logging.DEBUG)
        handler.emit = lambda record: self.logs.append(record.getMessage())  # type: ignore[method-assign]
        log = logging.getLogger("jax._src.compiler")
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)

    def _event(self, event: str, **kwargs: object) -> None:
        self.counts[event] = self.counts.get(event, 0) + 1

    def snapshot(self) -> tuple[dict[str, int], int]:
        return dict(self.counts), len(self.logs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--go")
    ap.add_argument("--ready")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--min-compile", type=float, default=0.0)
    ap.add_argument("--process-id", type=int)
    ap.add_argument("--hold-compile")
    ap.add_argument("--jax-cache")
    args = ap.parse_args()

    import jax
    import numpy as np
    from jax._src import compiler

    if args.jax_cache:
        jax.config.update("jax_compilation_cache_dir", args.jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", args.min_compile)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

    import kcache.jax

    if not args.no_install and not args.jax_cache:
        kcache.jax.install(min_compile_time_secs=args.min_compile)
    if args.process_id is not None:
        # What JAX's cache write reads (jax._src.compiler._cache_write), set once the backend
        # exists: its devices stay this process's (jax.distributed would number them globally).
        from jax._src import distributed

        jax.devices()
        distributed.global_state.process_id = args.process_id

    xla = {"n": 0}
    # XLA's compile, as jax._src.compiler calls it (backend_compile before jax 0.5).
    compile_name = "backend_compile_and_load" if hasattr(compiler, "backend_compile_and_load") else "backend_compile"
    real_compile = getattr(compiler, compile_name)

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        xla["n"] += 1
        if args.hold_compile:
            open(args.hold_compile, "w").close()
            time.sleep(600)
        return real_compile(*a, **k)

    setattr(compiler, compile_name, counting)
    events = Events()
    if args.ready:
        open(args.ready, "w").close()
    if args.go:
        while not os.path.exists(args.go):
            time.sleep(0.002)
    cases = []
    t0 = time.monotonic()
    for spec in args.case or ["small:f32:8"]:
        name, dtype, n = spec.split(":")
        x = np.linspace(0.5, 2.0, int(n)).astype({"f32": np.float32, "i32": np.int32}[dtype])
        before_counts, before_logs = events.snapshot()
        before_xla = xla["n"]
        start_unix = time.time()
        out = np.asarray(make_fn(name)(x))
        counts, _ = events.snapshot()
        logs = events.logs[before_logs:]
        cases.append({
            "case": spec,
            "start_unix": start_unix,
            "end_unix": time.time(),
            "result": out.tolist(),
            "xla_compiles": xla["n"] - before_xla,
            "jax_hits": counts.get("/jax/compilation_cache/cache_hits", 0)
            - before_counts.get("/jax/compilation_cache/cache_hits", 0),
            "jax_misses": counts.get("/jax/compilation_cache/cache_misses", 0)
            - before_counts.get("/jax/compilation_cache/cache_misses", 0),
            "jax_hit_logs": sum("Persistent compilation cache hit" in m for m in logs),
            "jax_miss_logs": sum("PERSISTENT COMPILATION CACHE MISS" in m for m in logs),
        })
    seconds = time.monotonic() - t0
    store = kcache.default_store() if kcache.jax.installed() else None
    if store is not None:
        store.flush()
    print(json.dumps({
        "installed": kcache.jax.installed(),
        "env": os.environ.get("KCACHE_JAX", ""),
        "cases": cases,
        "stats": kcache.jax.stats(),
        "store": store.stats() if store is not None else {},
        "seconds": seconds,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
