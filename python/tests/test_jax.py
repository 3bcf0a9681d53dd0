"""kcache.jax across processes, with real jax and jaxlib from PyPI (the test extra; CPU backend).

Each process is jax_worker.py: it imports jax, turns kcache.jax on, jit-compiles
and prints what JAX itself said (monitoring events, its log lines), how many
times XLA compiled (jax._src.compiler.backend_compile_and_load calls) and the
results. The team remote is a real redis-server.

Skips only when jax cannot be imported and KCACHE_REQUIRE_TOOLKIT is unset
(CI sets it: there a missing jax fails)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kcache

from conftest import run_python
from jax_support import import_jax_or_skip

jax = import_jax_or_skip()

import kcache.jax  # noqa: E402

WORKER = str(Path(__file__).with_name("jax_worker.py"))
REPO = Path(__file__).resolve().parents[2]


def _env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KCACHE_JAX", None)
    env.pop("KCACHE_REMOTE", None)
    env.update({"KCACHE_DIR": str(cache), "JAX_PLATFORMS": "cpu", "KCACHE_PUT": "sync"})
    env.update(extra or {})
    return env


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen[str], timeout: float = 240) -> tuple[dict, str]:  # type: ignore[type-arg]
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), err


def run(args: list[str], env: dict[str, str]) -> tuple[dict, str]:  # type: ignore[type-arg]
    return finish(start(args, env))


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("PYWARN") or line.startswith("kcache: warning")]


def kcache_cli() -> str | None:
    path = os.environ.get("KCACHE_CLI") or str(REPO / "build" / "ci" / "bin" / "kcache")
    if os.access(path, os.X_OK):
        return path
    if os.environ.get("KCACHE_REQUIRE_TOOLKIT"):
        pytest.fail(f"the kcache command is not built at {path} (cmake --build --preset ci)")
    return None


def test_a_new_process_and_a_new_host_load_what_another_compiled(tmp_path: Path, redis_url: str) -> None:
    # A: turned on from the environment alone (KCACHE_JAX=1, no install() call), writing to its
    # cache and the team's redis. B: a new process on the same cache. C: a new host (an empty
    # cache directory) with the same redis.
    cases = ["--case", "small:f32:8", "--case", "small:i32:4"]
    remote = {"KCACHE_REMOTE": redis_url}
    a, err_a = run([*cases, "--no-install"], _env(tmp_path / "a", {"KCACHE_JAX": "1", **remote,
                                                                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}))
    assert a["installed"] and a["env"] == "1", err_a[-2000:]
    assert [c["xla_compiles"] for c in a["cases"]] == [1, 1]
    assert [c["jax_misses"] for c in a["cases"]] == [1, 1]  # JAX wrote both (its own event)
    assert a["stats"]["compiled"] == 2 and a["stats"]["hits"] == 0
    assert warnings_in(err_a) == []

    for name, env in (("b", _env(tmp_path / "a")), ("c", _env(tmp_path / "c", remote))):
        got, err = run(cases, env)
        assert [c["xla_compiles"] for c in got["cases"]] == [0, 0], (name, got)
        assert [c["jax_hits"] for c in got["cases"]] == [1, 1], (name, got)  # JAX's monitoring event
        assert [c["jax_hit_logs"] for c in got["cases"]] == [1, 1], (name, got)  # JAX's log line
        assert [c["jax_miss_logs"] for c in got["cases"]] == [0, 0], (name, got)
        assert [c["result"] for c in got["cases"]] == [c["result"] for c in a["cases"]], name
        assert got["stats"]["hits"] == 2 and got["stats"]["compiled"] == 0, (name, got["stats"])
        assert got["stats"]["compile_seconds_saved"] > 0, name
        assert got["store"]["compile_us_saved"] > 0, name
        assert warnings_in(err) == [], (name, err[-2000:])
    assert got["store"]["remote"][0]["hits"] == 2  # C: both from the team's redis
    # `kcache stats` counts JAX's requests (route "jax") by how they ended: A's compiled, B's
    # served from the disk tier, C's from the team's redis.
    assert _jax_requests(tmp_path / "a") == (4, 2, {"disk": 2}), "A and B"
    assert _jax_requests(tmp_path / "c") == (2, 0, {"remote": 2}), "C"
    # D: the same cache, another XLA_FLAGS (set before jax starts, as a user would): its own key.
    d, _ = run(cases[:2], _env(tmp_path / "a", {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}))
    assert d["cases"][0]["xla_compiles"] == 1 and d["stats"]["hits"] == 0 and d["stats"]["compiled"] == 1

    # Every entry is a kcache entry like any other: listed, verified, counted.
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "c")) as s:
        entries = [e for e in s.list() if e.kind == kcache.jax.KIND]
        assert len(entries) == 2
        for e in entries:
            art = s.get(e.key)
            assert art is not None
            p = art.passport
            assert p["producer"]["name"] == "jax" and p["compile_duration_us"] > 0
            fields = {f["name"]: f["value"] for f in p["key_record"]["fields"]}
            assert fields["jax_version"] == jax.__version__ and fields["backend"] == "cpu"
            assert fields["jaxlib_version"] and fields["host_cpu"] and fields["jax_key"].startswith("jit_")
    cli = kcache_cli()
    if cli:
        env = _env(tmp_path / "c")
        ls = json.loads(subprocess.run([cli, "ls", "--json"], env=env, capture_output=True, text=True,
                                       check=True).stdout)
        assert sum(1 for e in (ls if isinstance(ls, list) else ls["entries"]) if e["kind"] == kcache.jax.KIND) == 2
        verify = subprocess.run([cli, "verify"], env=env, capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout + verify.stderr


def _jax_requests(cache: Path) -> tuple[int, int, dict[str, int]]:
    """The requests of the route "jax" in `cache`: (total, compiled, served by tier)."""
    with kcache.open_store(kcache.Config.load(cache_dir=cache)) as s:
        r = s.stats()["requests"]["routes"].get("jax", {"total": 0, "compiled": 0, "served": {}})
    return r["total"], r["compiled"], {t: n for t, n in r["served"].items() if t != "total" and n}


def _forge(cache: Path, key: kcache.Key) -> None:
    """Replaces the entry of `key` by a well-formed one (its passport checks out) whose payload is no executable."""
    from jax._src.compilation_cache import compress_executable

    with kcache.open_store(kcache.Config.load(cache_dir=cache, put="sync")) as s:
        art = s.get(key)
        assert art is not None
        fields = [(f["name"], f["value"]) for f in art.passport["key_record"]["fields"]]
        assert s.remove(key)
        junk = compress_executable(b"\0\0\0\1" + b"not an XLA executable " * 40)
        forged = kcache._kcache._record_artifact("jax", fields, kcache.jax.KIND, junk, "jax", jax.__version__, "", {})
        assert forged.key == key
        s.put(forged)


def test_a_damaged_or_forged_entry_is_a_miss_recompiled_with_one_warning(tmp_path: Path) -> None:
    import shutil

    a, _ = run(["--case", "small:f32:8"], _env(tmp_path / "a"))
    (payload,) = [p for p in (tmp_path / "a" / "v1" / "entries").glob("*/*") if not p.name.endswith(".pass")]
    key = kcache.Key(payload.name)
    procs = {}
    for damage in ("flip", "truncate", "forge"):
        cache = tmp_path / damage
        shutil.copytree(tmp_path / "a", cache)
        target = cache / payload.relative_to(tmp_path / "a")
        data = bytearray(target.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0x10
            target.write_bytes(bytes(data))
        elif damage == "truncate":
            target.write_bytes(bytes(data[: len(data) - 7]))
        else:
            _forge(cache, key)
        procs[damage] = start(["--case", "small:f32:8"], _env(cache))
    for damage, p in procs.items():
        got, err = finish(p)
        assert got["cases"][0]["xla_compiles"] == 1, (damage, got)
        assert got["cases"][0]["result"] == a["cases"][0]["result"], damage
        assert len(warnings_in(err)) == 1, (damage, warnings_in(err))
        with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / damage)) as s:
            again = s.get(key)  # compiled again and stored: the entry is whole
            assert again is not None and again.kind == kcache.jax.KIND and len(again) > 1000, damage


def test_four_processes_started_together_compile_once(tmp_path: Path) -> None:
    env = _env(tmp_path / "cache")
    go = tmp_path / "go"
    procs = [start(["--case", "slow:f32:6", "--go", str(go), "--ready", str(tmp_path / f"ready{i}")], env)
             for i in range(4)]
    deadline = time.monotonic() + 180
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    got = [finish(p) for p in procs]
    assert sum(g["cases"][0]["xla_compiles"] for g, _ in got) == 1, [g["stats"] for g, _ in got]
    assert sum(g["stats"]["hits_after_wait"] + g["stats"]["hits"] for g, _ in got) == 3
    assert len({json.dumps(g["cases"][0]["result"]) for g, _ in got}) == 1
    assert all(warnings_in(err) == [] for _, err in got)


def test_a_killed_compiler_is_taken_over_by_a_waiter_of_any_process_id(tmp_path: Path) -> None:
    # A takes the key and is SIGKILLed in XLA's compile; B, waiting for A's entry, takes over,
    # compiles and stores it, though it is process 1 of its job (JAX alone writes from process 0).
    cache = tmp_path / "cache"
    env = _env(cache)
    held, go, ready = tmp_path / "held", tmp_path / "go", tmp_path / "ready"
    b = start(["--go", str(go), "--ready", str(ready), "--process-id", "1"], env)
    a = start(["--hold-compile", str(held)], env)
    deadline = time.monotonic() + 180
    while not (held.exists() and ready.exists()):
        assert time.monotonic() < deadline and a.poll() is None and b.poll() is None, \
            (a.communicate()[1][-2000:] if a.poll() is not None else b.communicate()[1][-2000:])
        time.sleep(0.005)
    go.touch()
    time.sleep(1.0)  # B traces and lowers, misses, and waits for A's key
    killed_at = time.time()
    a.send_signal(signal.SIGKILL)
    a.wait()
    got, err = finish(b)
    case = got["cases"][0]
    assert case["start_unix"] < killed_at < case["end_unix"], case  # B was in its call when A died
    assert case["xla_compiles"] == 1 and got["stats"]["compiled"] == 1, got
    assert warnings_in(err) == []
    with kcache.open_store(kcache.Config.load(cache_dir=cache)) as s:
        (entry,) = s.list()
        assert entry.kind == kcache.jax.KIND  # B's entry, for the next process


def test_without_jax_install_warns_once_and_the_program_runs(tmp_path: Path) -> None:
    code = (
        "import sys, warnings; sys.modules['jax'] = None; warnings.simplefilter('always')\n"
        "import kcache.jax\n"
        "print(kcache.jax.why_unsupported())\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    print(kcache.jax.install(), kcache.jax.install(), kcache.jax.installed())\n"
        "print(len(w)); print(w[0].message)\n"
    )
    r = run_python(code, {"KCACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "jax is not installed" in lines[0] and "pip install jax" in lines[0]
    assert lines[1] == "False False False"
    assert lines[2] == "1" and "JAX runs without kcache" in lines[3]
