"""Triton kernels and a worker process for python/tests/test_triton.py.

Run as a script, it compiles kernel variants with real Triton for an explicit
target (GPUTarget("cuda", 90, 32): ptxas from the Triton wheel, no GPU) through
kcache.triton (the default store of $KCACHE_DIR / $KCACHE_REMOTE) and prints
one JSON line: {"compiles": n, "hits": n, "cubins": {variant: sha256}}.

  triton_worker.py compile V1,V2,...   [--go FILE]   [--hold FILE]   [--env-route]
    --go FILE     wait until FILE exists before compiling (a herd starts together)
    --hold FILE   after taking the first key and staging the first file of its
                  compile, create FILE and sleep: the test SIGKILLs this process
    --env-route   no install(): TRITON_CACHE_MANAGER names the manager
  triton_worker.py write TAG KEYS        put a group whose every file holds TAG
                                         under each Triton key (no single-flight)
  triton_worker.py read KEYS             read each key's group until it exists;
                                         print the tags each group's files hold
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def source(variant: int) -> ASTSource:
    """Variant `variant` of add_kernel: BLOCK = 32 * 2**variant (a distinct key each)."""
    return ASTSource(
        fn=add_kernel,
        signature={"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": 32 << variant},
    )


class Counter:
    """Counts compiles and hits through Triton's compilation listener."""

    def __init__(self) -> None:
        self.compiles = 0
        self.hits = 0

    def __call__(self, **kw: object) -> None:
        if kw["cache_hit"]:
            self.hits += 1
        else:
            self.compiles += 1


def compile_variants(variants: list[int]) -> dict[str, object]:
    counter = Counter()
    triton.knobs.compilation.listener = counter
    cubins = {}
    for v in variants:
        k = triton.compile(source(v), target=TARGET)
        cubins[str(v)] = hashlib.sha256(k.asm["cubin"]).hexdigest()
    triton.knobs.compilation.listener = None
    return {"compiles": counter.compiles, "hits": counter.hits, "cubins": cubins}


def _group_files(tag: str) -> dict[str, bytes]:
    return {f"k.{ext}": f"{ext} written by {tag}\n".encode() * 50 for ext in ("ttir", "ptx", "cubin", "json")}


def main() -> int:
    args = sys.argv[1:]
    mode = args.pop(0)
    if mode == "compile":
        variants = [int(v) for v in args.pop(0).split(",")]
        go = args[args.index("--go") + 1] if "--go" in args else None
        hold = args[args.index("--hold") + 1] if "--hold" in args else None
        import kcache.triton

        if "--env-route" not in args:
            kcache.triton.install()
        if hold is not None:
            manager = kcache.triton.KCacheManager
            real_put = manager.put

            def holding_put(self: object, data: object, filename: str, binary: bool = True) -> str:
                path = real_put(self, data, filename, binary)  # staged in this process's directory
                open(hold, "w").close()
                time.sleep(600)  # killed here, holding the key
                return path

            manager.put = holding_put
        while go is not None and not os.path.exists(go):
            time.sleep(0.005)
        print(json.dumps(compile_variants(variants)), flush=True)
        return 0
    import kcache.triton

    kcache.triton.install()
    manager = kcache.triton.KCacheManager
    keys = args[-1].split(",")
    if mode == "write":
        tag = args[0]
        for key in keys:
            m = manager(key)
            m._grouped = True  # as after get_group, without taking the key: writers race
            group = {name: m.put(data, name) for name, data in _group_files(tag).items()}
            m.put_group("k.json", group)
        return 0
    if mode == "read":
        seen = []
        for key in keys:
            deadline = time.monotonic() + 60
            group = None
            while group is None and time.monotonic() < deadline:
                group = manager(key)._lookup(kcache.triton.GROUP_KIND, "k.json", take_flight=False)
            assert group is not None, key
            tags = set()
            for name, path in group.items():
                with open(path, "rb") as f:
                    data = f.read()
                ext = name.split(".")[1]
                tag = data.split(b"\n")[0].decode().rsplit(" ", 1)[1]
                assert data == f"{ext} written by {tag}\n".encode() * 50, (name, data[:80])
                tags.add(tag)
            seen.append(sorted(tags))
        print(json.dumps(seen), flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
