"""kcache.cuda_core.ProgramCache: one compile per key across processes and
hosts (a real redis-server as the team remote), and removal that is local
unless the caller asks for the remote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("cuda.core")

import kcache  # noqa: E402
import kcache.cuda_core as kcc  # noqa: E402
from conftest import slow_kernel_source  # noqa: E402

# One "host": its own cache directory, the shared remote. It waits for the
# go file, compiles through Program.compile(cache=ProgramCache()) and reports
# whether it compiled (cuda.core sets the key only after compiling) and what
# it got.
HOST = r"""
import hashlib, json, sys, time
from pathlib import Path
from cuda.core import Program, ProgramOptions
import kcache, kcache.cuda_core as kcc

compiled = []

class Counting(kcc.ProgramCache):
    def __setitem__(self, key, value):
        compiled.append(1)
        super().__setitem__(key, value)

go, src = Path(sys.argv[1]), sys.argv[2]
cache = Counting()
Path(sys.argv[3]).touch()  # ready
while not go.exists():
    time.sleep(0.002)
obj = Program(src, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=cache)
remote = cache.store.stats()["remote"]
cache.close()
print(json.dumps({"compiled": len(compiled), "sha": hashlib.sha256(bytes(obj.code)).hexdigest(),
                  "remote": remote}))
"""


@pytest.mark.parametrize("hosts", [4, 1])
def test_four_hosts_one_cold_key_compile_once(tmp_path: Path, redis_url: str, hosts: int) -> None:
    # C05 across hosts: four processes with four cache directories (nothing
    # shared but the Redis remote) ask for one cold key at the same moment;
    # and four processes of one host (one cache directory, the same remote).
    src = slow_kernel_source("herd_" + os.urandom(6).hex())
    go = tmp_path / "go"
    procs = []
    for i in range(4):
        env = dict(os.environ, KCACHE_DIR=str(tmp_path / f"host{i % hosts}"), KCACHE_REMOTE=redis_url)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", HOST, str(go), src, str(tmp_path / f"ready{i}")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline, "the hosts did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["compiled"] for r in results) == 1, results
    assert len({r["sha"] for r in results}) == 1
    # Store.stats()["remote"]: this process's counters of its one remote tier.
    assert all(len(r["remote"]) == 1 for r in results)
    owner = next(r for r in results if r["compiled"] == 1)
    assert owner["remote"][0]["hits"] == 0 and owner["remote"][0]["misses"] >= 1
    if hosts == 4:  # each waiter got the owner's entry from the remote
        waiters = [r for r in results if r["compiled"] == 0]
        assert all(r["remote"][0]["hits"] >= 1 for r in waiters), results


def test_threads_of_one_process_compile_once(tmp_path: Path) -> None:
    import threading

    from cuda.core import Program, ProgramOptions

    store = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "c"))
    compiled = []

    class Counting(kcc.ProgramCache):
        def __setitem__(self, key: bytes | str, value: object) -> None:
            compiled.append(1)
            super().__setitem__(key, value)

    cache = Counting(store)
    src = slow_kernel_source("threads_" + os.urandom(6).hex())
    codes: list[bytes] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        codes.append(bytes(Program(src, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=cache).code))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    store.close()
    assert len(codes) == 4 and len(set(codes)) == 1
    assert len(compiled) == 1


def test_a_miss_that_is_never_set_is_given_up_and_the_next_caller_compiles(tmp_path: Path) -> None:
    # The owner's compile "raised": it never sets the key. Its next miss gives
    # the lease up, so another process does not wait for it.
    store = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "c", put="sync"))
    cache = kcc.ProgramCache(store, compile_timeout=60)
    assert cache.get(b"failed-key") is None  # owner of b"failed-key" now
    assert cache.get(b"other-key") is None   # gives b"failed-key" up
    code = (
        "import kcache, kcache.cuda_core as kcc, time\n"
        f"s = kcache.open_store(kcache.Config.load(cache_dir={str(tmp_path / 'c')!r}, put='sync'))\n"
        "c = kcc.ProgramCache(s)\n"
        "t = time.monotonic(); got = c.get(b'failed-key'); waited = time.monotonic() - t\n"
        "c[b'failed-key'] = b'from the child'\n"
        "print(got, waited < 30)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["None", "True"]
    cache[b"other-key"] = b"mine"
    assert cache[b"failed-key"] == b"from the child" and cache[b"other-key"] == b"mine"
    store.close()


def _remote_has(redis_url: str, cache_dir: Path, kkey: kcache.Key) -> bool:
    """Whether the remote holds `kkey`, asked through a fresh cache directory."""
    cfg = kcache.Config.load(cache_dir=cache_dir, remote=redis_url, memory_size=0, put="sync")
    with kcache.open_store(cfg) as s:
        return s.get(kkey) is not None


def test_removal_is_local_unless_the_remote_is_asked_for(tmp_path: Path, redis_url: str) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "a", remote=redis_url, put="sync")
    store = kcache.open_store(cfg)
    cache = kcc.ProgramCache(store)
    keys = [b"k-del", b"k-remove", b"k-clear", b"k-store"]
    for k in keys:
        cache[k] = b"value of " + k
    kkeys = {k: kcache._kcache._domain_key("cuda-core", k) for k in keys}
    # Uploads run behind the local put: wait until the remote has each one.
    deadline = time.monotonic() + 30
    for i, k in enumerate(keys):
        while not _remote_has(redis_url, tmp_path / f"probe{i}", kkeys[k]):
            assert time.monotonic() < deadline, f"the remote never got {k!r}"
            time.sleep(0.05)

    def local_keys() -> set[str]:
        return {str(e.key) for e in store.list()}

    del cache[b"k-del"]
    assert cache.remove(b"k-remove") is True
    assert store.remove(kkeys[b"k-store"]) is True
    assert str(kkeys[b"k-del"]) not in local_keys() and str(kkeys[b"k-store"]) not in local_keys()
    for k in (b"k-del", b"k-remove", b"k-store"):
        assert _remote_has(redis_url, tmp_path / f"after-{k.decode()}", kkeys[k]), k
    cache.clear()
    assert len(cache) == 0
    assert _remote_has(redis_url, tmp_path / "after-clear", kkeys[b"k-clear"])
    # Asked for: the team's objects go too.
    assert cache.remove(b"k-remove", remote=True) is True
    assert not _remote_has(redis_url, tmp_path / "gone-remove", kkeys[b"k-remove"])
    cache[b"k-clear"] = b"again"
    cache.clear(remote=True)
    assert not _remote_has(redis_url, tmp_path / "gone-clear", kkeys[b"k-clear"])
    assert store.remove(kkeys[b"k-store"], remote=True) is True
    assert not _remote_has(redis_url, tmp_path / "gone-store", kkeys[b"k-store"])
    store.close()
