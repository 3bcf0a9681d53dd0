"""Triton kernels and a worker process for python/tests/test_triton.py.

Run as a script, it compiles kernel variants with real Triton for an explicit
target (GPUTarget("cuda", 90, 32): ptxas from the Triton wheel, no GPU) through
kcache.triton (the default store of $KCACHE_DIR / $KCACHE_REMOTE) and prints
one JSON line: {"compiles": n, "hits": n, "cubins": {variant: sha256}, "groups": {variant: group_digest}}.

  triton_worker.py compile V1,V2,...   [--go FILE]   [--hold FILE]   [--env-route]
    --go FILE     wait until FILE exists before compiling (a herd starts together)
    --hold FILE   after taking the first key and staging the first file of its
                  compile, create FILE and sleep: the test SIGKILLs this process
    --env-route   no install(): TRITON_CACHE_MANAGER names the manager
  triton_worker.py write TAG KEYS        put a group whose every file holds TAG
                                         under each Triton key (no single-flight)
  triton_worker.py read KEYS             read each key's group until it exists;
                                         print the tags each group's files hold
  triton_worker.py rounds V1,V2,... R SYNC_DIR READS
                                         R herd rounds, each on cold keys (salt = the
                                         round): touch SYNC_DIR/ready-<r>-<pid>, wait for
                                         SYNC_DIR/go-<r>, compile the variants, then READS
                                         times remove this process's own run directories
                                         and compile them again; prints one JSON list of
                                         {"compiles", "hits", "groups": {variant: digest},
                                         "failures": [...]} per round
  triton_worker.py janitor CACHE_DIR STOP SEED [KCACHE_CLI]
                                         until STOP exists, races the store's renames with
                                         unlinks and renames of its own (module docstring of
                                         janitor()); prints its action counts
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


@triton.jit
def salted_add_kernel(x, y, out, n, BLOCK: tl.constexpr, SALT: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def salted_source(variant: int, salt: int) -> ASTSource:
    """add_kernel with BLOCK = 32 * 2**variant and an unused constexpr SALT: a cold key per salt."""
    return ASTSource(
        fn=salted_add_kernel,
        signature={"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr", "SALT": "constexpr"},
        constexprs={"BLOCK": 32 << variant, "SALT": salt},
    )


def group_digest(kernel: object) -> str:
    """SHA-256 over a compiled kernel's whole group (every stage Triton read, and its metadata
    file), after checking that it is whole: every stage there and the metadata of this key."""
    asm = kernel.asm  # type: ignore[attr-defined]
    missing = {"ttir", "ttgir", "llir", "ptx", "cubin"} - set(asm)
    assert not missing, f"group without {missing}"
    (meta_path,) = [p for n, p in kernel.metadata_group.items() if n.endswith(".json")]  # type: ignore[attr-defined]
    with open(meta_path, "rb") as f:
        meta = f.read()
    assert json.loads(meta)["hash"] == kernel.hash, "metadata of another key"  # type: ignore[attr-defined]
    h = hashlib.sha256(meta)
    for ext in sorted(asm):
        data = asm[ext]
        h.update(f"\0{ext}\0{len(data)}\0".encode())
        h.update(data if isinstance(data, bytes) else data.encode())
    return h.hexdigest()


def rounds(variants: list[int], count: int, sync: str, reads: int) -> list[dict[str, object]]:
    import shutil
    import traceback

    import kcache._triton_files as files

    out: list[dict[str, object]] = []
    for r in range(count):
        counter = Counter()
        triton.knobs.compilation.listener = counter
        groups: dict[str, set[str]] = {str(v): set() for v in variants}
        failures: list[str] = []
        open(os.path.join(sync, f"ready-{r}-{os.getpid()}"), "w").close()
        while not os.path.exists(os.path.join(sync, f"go-{r}")):
            time.sleep(0.002)
        for attempt in range(1 + reads):
            if attempt:  # a cleaner took this process's files: they are written again
                for run in (files.run, files.run_memory):
                    if run.path:
                        shutil.rmtree(run.path, ignore_errors=True)
            for v in variants:
                try:
                    groups[str(v)].add(group_digest(triton.compile(salted_source(v, r), target=TARGET)))
                except BaseException as e:  # noqa: BLE001 - reported to the test
                    failures.append("".join(traceback.format_exception(e))[-2000:])
        triton.knobs.compilation.listener = None
        out.append({"compiles": counter.compiles, "hits": counter.hits, "failures": failures,
                    "groups": {v: sorted(d) for v, d in groups.items()}})
    return out


def janitor(cache_dir: str, stop: str, seed: int, cli: str | None) -> dict[str, int]:
    """What a shared cache directory lives through while Triton processes use it: at random,
    every few milliseconds, one of

    - remove: an entry removed through the store (``Store.remove``);
    - unlink: an entry's payload or passport unlinked behind the store's back;
    - rename: one entry's payload renamed over another's (a valid group under the wrong key);
    - clear / prune: ``kcache clear``, ``kcache prune --max-size 40K`` (real commands);
    - run-root: ``<cache>/v1/triton/run`` removed (a cleaner of the shared cache directory);
    - plant: directories of dead processes planted in both run roots, which the Triton
      processes' sweeps race to remove.
    """
    import random
    import shutil
    import subprocess

    import kcache
    import kcache._triton_files as files

    rng = random.Random(seed)
    counts = {a: 0 for a in ("remove", "unlink", "rename", "clear", "prune", "run-root", "plant")}
    entries_dir = os.path.join(cache_dir, "v1", "entries")
    roots = [os.path.join(cache_dir, "v1", "triton", "run")]
    memory = files._memory_root()
    if memory is not None:
        roots.append(memory)
    domain = files._pid_domain()
    store = kcache.open_store(kcache.Config.load(cache_dir=cache_dir))

    def entry_files() -> list[str]:
        out = []
        try:
            for shard in os.listdir(entries_dir):
                d = os.path.join(entries_dir, shard)
                out += [os.path.join(d, n) for n in os.listdir(d)]
        except OSError:
            pass
        return out

    while not os.path.exists(stop):
        action = rng.choice(["remove", "remove", "unlink", "unlink", "rename", "rename", "run-root", "plant"]
                            + (["clear", "prune"] if cli else []))
        if action == "remove":
            listed = store.list()
            if listed:
                store.remove(rng.choice(listed).key)
        elif action == "unlink":
            names = entry_files()
            if names:
                try:
                    os.unlink(rng.choice(names))
                except FileNotFoundError:
                    pass
        elif action == "rename":
            payloads = [n for n in entry_files() if len(os.path.basename(n)) == 64]
            if len(payloads) >= 2:
                a, b = rng.sample(payloads, 2)
                try:
                    os.rename(a, b)
                except FileNotFoundError:
                    pass
        elif action in ("clear", "prune"):
            args = [cli, "clear"] if action == "clear" else [cli, "prune", "--max-size", "40K"]
            r = subprocess.run(args, env={**os.environ, "KCACHE_DIR": cache_dir}, capture_output=True, text=True)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        elif action == "run-root":
            shutil.rmtree(roots[0], ignore_errors=True)
        else:
            for root in roots:
                stale = os.path.join(root, f"{domain}-{4194304 + rng.randrange(1 << 20)}-1", "g1")
                try:
                    os.makedirs(stale, exist_ok=True)
                    with open(os.path.join(stale, "k.cubin"), "wb") as f:
                        f.write(b"stale")
                except OSError:
                    pass  # a sweep removed it as it was made
        counts[action] += 1
        time.sleep(rng.uniform(0.002, 0.015))
    store.close()
    return counts


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
    cubins, groups = {}, {}
    for v in variants:
        k = triton.compile(source(v), target=TARGET)
        cubins[str(v)] = hashlib.sha256(k.asm["cubin"]).hexdigest()
        groups[str(v)] = group_digest(k)
    triton.knobs.compilation.listener = None
    return {"compiles": counter.compiles, "hits": counter.hits, "cubins": cubins, "groups": groups}


def _group_files(tag: str) -> dict[str, bytes]:
    # A group Triton could load (kcache serves no other): its metadata names a target and the kernel.
    files = {f"k.{ext}": f"{ext} written by {tag}\n".encode() * 50 for ext in ("ttir", "ptx", "cubin")}
    meta = {"name": "k", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "written_by": tag}
    files["k.json"] = json.dumps(meta).encode()
    return files


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
    if mode == "rounds":
        import kcache.triton

        kcache.triton.install()
        print(json.dumps(rounds([int(v) for v in args[0].split(",")], int(args[1]), args[2], int(args[3]))), flush=True)
        return 0
    if mode == "janitor":
        print(json.dumps(janitor(args[0], args[1], int(args[2]), args[3] if len(args) > 3 else None)), flush=True)
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
                if name.endswith(".json"):
                    tag = json.loads(data)["written_by"]
                else:
                    tag = data.split(b"\n")[0].decode().rsplit(" ", 1)[1]
                assert data == _group_files(tag)[name], (name, data[:80])
                tags.add(tag)
            seen.append(sorted(tags))
        print(json.dumps(seen), flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
