"""Requests counted by how they ended, for `kcache stats` (docs/python.md, "Counting requests"):
kcache.compile (one cold and three warm runs in new processes over one cache directory, real
NVRTC; no GPU) and kcache.record_request. cuda.core's routes: test_cuda_core.py; Triton's:
test_triton.py; `kcache run` turning Triton on: here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kcache
from conftest import SAXPY, run_python

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))


def _requests(cache: Path) -> dict:
    with kcache.open_store(kcache.Config.load(cache_dir=cache)) as store:
        return store.stats()["requests"]


def _four_runs(code: str, cache: Path) -> None:
    for run in range(4):
        r = run_python(code, {"KCACHE_DIR": str(cache)})
        assert r.returncode == 0, f"run {run}: {r.stderr}"
        assert r.stdout.split()[-1] == ("compiled" if run == 0 else "hit"), r.stdout


def test_kcache_compile_one_cold_and_three_warm_runs_are_three_served_and_one_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _four_runs(f"import kcache; print(kcache.compile({SAXPY!r}, arch='sm_90').outcome)", cache)
    python = _requests(cache)["routes"]["python"]
    assert python["total"] == 4
    assert python["served"] == {"total": 3, "memory": 0, "disk": 3, "bundle": 0, "remote": 0, "failed": 0}
    assert python["compiled"] == 1 and python["uncached"] == 0 and python["failed"] == 0
    assert python["compile_us"] > 0 and python["compile_us_saved"] > python["compile_us"]
    # The same in this process twice: the second is served from the memory tier, with its tier.
    with kcache.open_store(kcache.Config.load(cache_dir=cache)) as store:
        first = kcache.compile(SAXPY, arch="sm_90", store=store)
        again = kcache.compile(SAXPY, arch="sm_90", store=store)
        assert (first.served_from, again.served_from) == ("disk", "memory")
        assert store.get(first.key).served_from == "memory"
        assert again.compile_duration_us == first.compile_duration_us > 0
    assert _requests(cache)["routes"]["python"]["served"]["memory"] == 1


def test_record_request_counts_what_an_integration_says_and_refuses_bad_arguments(store: kcache.Store) -> None:
    kcache.record_request("torch", "served", tier="remote", compile_us=1500, store=store)
    kcache.record_request("torch", "compiled", compile_us=900, store=store)
    kcache.record_request("torch", "uncached", store=store)
    kcache.record_request("jax", "failed", store=store)
    req = store.stats()["requests"]
    assert req["total"] == 4 and req["served"]["remote"] == 1 and req["failed"] == 1
    torch = req["routes"]["torch"]
    assert (torch["total"], torch["compiled"], torch["uncached"]) == (3, 1, 1)
    assert (torch["compile_us_saved"], torch["compile_us"]) == (1500, 900)
    for bad in [("Torch", "served", "disk"), ("x" * 17, "compiled", None), ("torch", "hit", None),
                ("torch", "served", None), ("torch", "served", "ssd")]:
        with pytest.raises(kcache.InvalidArgument):
            kcache.record_request(bad[0], bad[1], tier=bad[2], store=store)
    with pytest.raises(kcache.InvalidArgument):
        kcache.record_request("torch", "compiled", compile_us=-1, store=store)
    assert store.stats()["requests"]["total"] == 4


def test_a_flight_is_one_request_counted_by_how_it_ended(store: kcache.Store) -> None:
    # How kcache.torch, kcache.jax, kcache.triton and cuda_core count a miss: its flight, under their route.
    k = kcache._kcache
    keys = [k._domain_key("test", f"k{i}") for i in range(3)]
    first = k._Flight(store, keys[0], 60.0, "torch")
    assert first.wait() is None
    assert first.deliver(store, k._domain_artifact("test", "k0", "blob", b"x", "test", "1")) == "compiled"
    for key, uncached in ((keys[1], False), (keys[2], True)):
        f = k._Flight(store, key, 60.0, "torch")
        assert f.wait() is None
        f.abandon(uncached=uncached)  # the compile raised; or compiled, not stored
    again = k._Flight(store, keys[0], 60.0, "torch")
    got = again.wait()
    assert got is not None and got.served_from == "memory"
    deadline = time.monotonic() + 30  # an abandoned flight's thread counts once it has let go of the key
    while store.stats()["requests"]["total"] < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    torch = store.stats()["requests"]["routes"]["torch"]
    assert (torch["total"], torch["compiled"], torch["failed"], torch["uncached"], torch["served"]["memory"]) == (
        4, 1, 1, 1, 1), torch
    with pytest.raises(kcache.InvalidArgument):
        k._Flight(store, keys[0], 60.0, "Not A Route")


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_kcache_stats_shows_the_python_routes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with kcache.open_store(kcache.Config.load(cache_dir=cache)) as store:
        kcache.record_request("torch", "served", tier="disk", compile_us=10, store=store)
    out = subprocess.run([str(KCACHE), "stats", "--json"], env=dict(os.environ, KCACHE_DIR=str(cache)),
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["requests"]["routes"]["torch"]["served"]["disk"] == 1


# `kcache run` turns kcache's Triton cache on in Python programs that can import kcache, also
# when Python finds kcache through PYTHONPATH, where no .pth file is read (docs/run.md).
STARTUP = (
    "import os, sys; a = sys.modules.get('kcache._autoload');"
    "print(os.environ.get('KCACHE_TRITON'), a is not None and 'triton' in a._pending)"
)


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_kcache_run_turns_the_triton_cache_on_for_a_kcache_found_through_pythonpath(tmp_path: Path) -> None:
    # The interpreter of this venv without its site-packages (-S would drop sitecustomize too):
    # kcache is importable only through PYTHONPATH, as from a source tree.
    site = Path(kcache.__file__).resolve().parents[1]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "sitecustomize.py").write_text("import os\nos.environ['HIDDEN_SITECUSTOMIZE'] = 'ran'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_TRITON")}
    env.update(KCACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=f"{site}:{tmp_path / 'other'}",
               PYTHONNOUSERSITE="1")
    probe = STARTUP + ";print(os.environ.get('HIDDEN_SITECUSTOMIZE'))"
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

    def run(*prefix: str, **extra: str) -> list[str]:
        done = subprocess.run([*prefix, python, "-c", probe], env=dict(env, **extra), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "kcache: warning" not in done.stderr and "Error in sitecustomize" not in done.stderr, done.stderr
        return done.stdout.split()

    if run("env", KCACHE_TRITON="1")[:2] != ["1", "False"]:
        pytest.skip("this interpreter reads kcache-autoload.pth (kcache is installed for it)")
    # Under kcache run: on, the hook waits for `import triton`, and the hidden sitecustomize still runs.
    assert run(str(KCACHE), "run", "--") == ["1", "True", "ran"]
    # A KCACHE_TRITON the user set is kept.
    assert run(str(KCACHE), "run", "--", KCACHE_TRITON="0")[:2] == ["0", "False"]
