"""Objects shared between threads; the GIL is released while kcache works."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import kcache
from conftest import SAXPY


def test_one_compile_per_key_across_threads(store: kcache.Store) -> None:
    src = SAXPY + "\n// threads " + os.urandom(8).hex() + "\n"
    barrier = threading.Barrier(8)

    def work(_: int) -> kcache.Artifact:
        barrier.wait()
        return kcache.compile(src, store=store)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    assert len({r.payload for r in results}) == 1
    outcomes = sorted(r.outcome for r in results)
    assert outcomes.count("compiled") == 1, outcomes
    assert set(outcomes) <= {"compiled", "hit", "hit_after_wait"}


def test_store_shared_by_threads(store: kcache.Store) -> None:
    def work(i: int) -> None:
        for j in range(50):
            payload = f"{i}:{j}:".encode() + os.urandom(64)
            art = kcache.Artifact.from_bytes(payload)
            store.put(art)
            got = store.get(art.key)
            assert got is not None and got.payload == payload

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert store.stats()["entries"] == 400


def test_the_gil_is_released_during_a_compile(store: kcache.Store) -> None:
    # A Python thread keeps counting while NVRTC compiles a kernel that takes
    # a while; with the GIL held it could not run at all.
    medium = Path(__file__).resolve().parents[2] / "bench" / "corpus" / "medium.cu"
    src = medium.read_text() + "\n// gil " + os.urandom(8).hex() + "\n"
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks
        art = kcache.compile(src, store=store)
        during = ticks - before
    finally:
        done.set()
        t.join()
    assert art.outcome == "compiled"
    assert during >= 5, during
