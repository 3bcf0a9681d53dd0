"""kcache.jax in this process, with real jax and jaxlib (CPU backend): keys, JAX's thresholds,
host callbacks, and JAX versions or internals kcache.jax does not know.

Skips only when jax cannot be imported and KCACHE_REQUIRE_TOOLKIT is unset."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

import kcache

from jax_support import import_jax_or_skip

jax = import_jax_or_skip()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import cache_key, compiler  # noqa: E402
from jax._src import config as jax_config  # noqa: E402

import kcache.jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
# XLA's compile, as jax._src.compiler calls it (backend_compile before jax 0.5).
_XLA_COMPILE = "backend_compile_and_load" if hasattr(compiler, "backend_compile_and_load") else "backend_compile"


@pytest.fixture
def xla(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts XLA compiles (calls of jax._src.compiler's compile function)."""
    counts = {"n": 0}
    name = _XLA_COMPILE
    real = getattr(compiler, name)

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        counts["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(compiler, name, counting)
    return counts


@pytest.fixture
def jstore(tmp_path: Path):
    """A fresh store installed as JAX's cache (every compile stored); uninstalled after."""
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache", put="sync"))
    before = jax_config.persistent_cache_min_compile_time_secs.value
    assert kcache.jax.install(store=s, min_compile_time_secs=0)
    jax.clear_caches()
    yield s
    kcache.jax.uninstall()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)
    jax.clear_caches()
    s.close()


def _jax_keys(s: kcache.Store, kind: str = kcache.jax.KIND) -> list[str]:
    out = []
    for e in s.list():
        if e.kind == kind:
            art = s.get(e.key)
            assert art is not None
            out.append(art.passport["labels"]["jax.key"])
    return out


def small(x):  # type: ignore[no-untyped-def]
    return jnp.cos(x) * 3 - jnp.max(x)


X8 = np.linspace(0.0, 1.0, 8, dtype=np.float32)


def test_jax_key_changes_with_what_changes_the_executable(jstore: kcache.Store, xla: dict[str, int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    f = jax.jit(small)
    f(X8)
    f(np.linspace(0.0, 1.0, 16, dtype=np.float32))  # shape
    f(np.arange(8, dtype=np.int32))  # dtype
    jax.jit(small).lower(X8).compile(compiler_options={"xla_cpu_enable_fast_math": True})  # compile options
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    jax.clear_caches()
    jax.jit(small)(X8)
    monkeypatch.delenv("XLA_FLAGS")
    real = cache_key.jaxlib_version_str
    cache_key.jaxlib_version_str = "0.0.1"  # another jaxlib
    jax.clear_caches()
    try:
        jax.jit(small)(X8)
    finally:
        cache_key.jaxlib_version_str = real
    keys = _jax_keys(jstore)
    assert xla["n"] == 6 and len(set(keys)) == 6, keys
    jax.clear_caches()
    jax.jit(small)(X8)  # none of them: the first key, a hit
    assert xla["n"] == 6


def test_another_recorded_jaxlib_or_host_cpu_misses_with_jax_key_unchanged(
        jstore: kcache.Store, xla: dict[str, int]) -> None:
    jax.jit(small)(X8)
    seams = kcache.jax._seams
    real = (seams.jaxlib_version, kcache.jax._host_cpu())
    for jaxlib, host in (("0.0.1", real[1]), (real[0], "x86_64;vendor_id=Other;features=0")):
        seams.jaxlib_version, kcache.jax._host_cpu_memo = jaxlib, host
        kcache.jax._kkeys.clear()
        jax.clear_caches()
        try:
            jax.jit(small)(X8)
        finally:
            seams.jaxlib_version, kcache.jax._host_cpu_memo = real
            kcache.jax._kkeys.clear()
    assert xla["n"] == 3
    keys = _jax_keys(jstore)
    assert len(keys) == 3 and len(set(keys)) == 1  # one JAX key, three kcache entries
    jax.clear_caches()
    jax.jit(small)(X8)
    assert xla["n"] == 3


def test_kcache_key_adds_what_jax_key_leaves_out(jstore: kcache.Store) -> None:
    base = kcache.jax.key_fields("jit_f-00", "cpu", "cpu")
    names = [n for n, _ in base]
    assert names == ["format", "jax_version", "jaxlib_version", "backend", "platform_version", "host_cpu", "jax_key"]
    assert dict(base)["jax_version"] == jax.__version__
    gpu = kcache.jax.key_fields("jit_f-00", "gpu", "cuda 12080")
    assert "host_cpu" not in dict(gpu)  # a GPU executable does not depend on the host CPU: shared across hosts
    keys = {kcache._kcache._key_of_values("jax", f) for f in (base, gpu, kcache.jax.key_fields("jit_f-01", "cpu", "cpu"))}
    assert len(keys) == 3


def test_compiles_under_jax_threshold_are_not_stored_and_nobody_waits_for_them(
        jstore: kcache.Store, xla: dict[str, int]) -> None:
    kcache.jax.install(store=jstore, min_compile_time_secs=3600)  # JAX's 1 s default, raised: nothing is slow enough
    before = kcache.jax.stats()
    f = jax.jit(small)
    want = np.asarray(f(X8))
    assert _jax_keys(jstore) == [] and len(_jax_keys(jstore, kcache.jax.NOTE_KIND)) == 1
    jax.clear_caches()
    assert np.array_equal(np.asarray(jax.jit(small)(X8)), want)  # compiled at once, as the note says
    after = kcache.jax.stats()
    assert after["not_stored"] - before["not_stored"] == 1
    assert after["skipped_by_note"] - before["skipped_by_note"] == 1
    assert xla["n"] == 2
    # `kcache stats` (route "jax"): both compiled without the cache, none failed.
    req = jstore.stats()["requests"]["routes"]["jax"]
    assert (req["total"], req["uncached"], req["failed"], req["compiled"]) == (2, 2, 0, 0), req
    # A team lowers the threshold: the note gives way to the executable, and the next process hits.
    kcache.jax.install(store=jstore, min_compile_time_secs=0)
    jax.clear_caches()
    jax.jit(small)(X8)
    assert len(_jax_keys(jstore)) == 1 and _jax_keys(jstore, kcache.jax.NOTE_KIND) == []
    assert kcache.jax.stats()["skipped_by_note"] == after["skipped_by_note"]  # it took the key's lease
    jax.clear_caches()
    assert np.array_equal(np.asarray(jax.jit(small)(X8)), want)
    assert xla["n"] == 3 and kcache.jax.stats()["hits"] - after["hits"] == 1
    req = jstore.stats()["requests"]["routes"]["jax"]
    assert (req["total"], req["compiled"], req["served"]["total"], req["failed"]) == (4, 1, 1, 0), req


def test_a_function_with_host_callbacks_is_never_stored(jstore: kcache.Store, xla: dict[str, int]) -> None:
    seen = []

    def with_callback(x):  # type: ignore[no-untyped-def]
        jax.debug.callback(lambda v: seen.append(1), x)
        return x + 1

    for _ in range(2):
        jax.clear_caches()
        jax.jit(with_callback)(X8)
    assert xla["n"] == 2 and len(seen) == 2
    assert _jax_keys(jstore) == [] and len(_jax_keys(jstore, kcache.jax.NOTE_KIND)) == 1


def test_install_sets_the_variable_children_inherit(jstore: kcache.Store) -> None:
    assert os.environ["KCACHE_JAX"] == "1" and kcache.jax.installed()
    kcache.jax.uninstall()
    assert "KCACHE_JAX" not in os.environ and not kcache.jax.installed()
    from jax._src import compilation_cache as cc

    assert not isinstance(cc._cache, kcache.jax._Interface)


def test_moved_internals_warn_once_and_jax_runs_without_kcache(tmp_path: Path, xla: dict[str, int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    real = compiler._cache_write
    monkeypatch.setattr(compiler, "_cache_write", lambda *a: real(*a))  # another signature: "moved"
    monkeypatch.setattr(kcache.jax, "_warned", set())
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache", put="sync"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert kcache.jax.install(store=s) is False
        assert kcache.jax.install(store=s) is False
    assert len(w) == 1 and "internals moved" in str(w[0].message) and "_cache_write" in str(w[0].message)
    assert "internals moved" in (kcache.jax.why_unsupported() or "")
    jax.clear_caches()
    assert np.allclose(np.asarray(jax.jit(small)(X8)), np.cos(X8) * 3 - X8.max(), atol=1e-6)
    assert xla["n"] == 1 and not kcache.jax.installed() and s.list() == []
    s.close()


def test_an_untested_jax_version_with_the_same_internals_is_used_after_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jax, "__version__", "99.0.0")
    monkeypatch.setattr(kcache.jax, "_warned", set())
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache", put="sync"))
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert kcache.jax.install(store=s) is True
        assert len(w) == 1 and "99.0.0 is outside the versions" in str(w[0].message)
        assert kcache.jax.installed()
    finally:
        kcache.jax.uninstall()
        s.close()


def test_a_compile_that_raises_gives_its_key_up_at_once(jstore: kcache.Store, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = getattr(compiler, _XLA_COMPILE)

    def failing(*a, **k):  # type: ignore[no-untyped-def]
        raise RuntimeError("XLA ran out of memory (injected)")

    monkeypatch.setattr(compiler, _XLA_COMPILE, failing)
    with pytest.raises(RuntimeError, match="injected"):
        jax.jit(small)(X8)
    # The key's lease went with the error: nothing held, no lock file left for a waiter to wait on.
    assert kcache.jax._thread_state().flights == {}
    locks = tmp_path / "cache" / "v1" / "locks"
    deadline = time.monotonic() + 10  # the flight's own thread lets go of the lock
    while locks.exists() and list(locks.glob("*.lock")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not locks.exists() or list(locks.glob("*.lock")) == []
    monkeypatch.setattr(compiler, _XLA_COMPILE, real)
    jax.clear_caches()
    jax.jit(small)(X8)
    assert len(_jax_keys(jstore)) == 1
