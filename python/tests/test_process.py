"""A second process finds what the first one compiled."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import TEMPLATED, run_python

CHILD = r"""
import json, sys, kcache
a = kcache.compile(sys.argv_src, name_expressions=["scale<float>"])
print(json.dumps({"outcome": a.outcome, "key": str(a.key), "names": a.lowered_names, "sha": a.passport["payload"]["sha256"]}))
"""


def _child(src: str, cache: Path) -> dict:
    import json

    code = CHILD.replace("sys.argv_src", repr(src))
    p = run_python(code, env={"KCACHE_DIR": str(cache)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_new_process_hits_without_loading_nvrtc(tmp_path: Path) -> None:
    src = TEMPLATED + "// " + os.urandom(8).hex() + "\n"
    first = _child(src, tmp_path / "cache")
    second = _child(src, tmp_path / "cache")
    assert first["outcome"] == "compiled"
    assert second["outcome"] == "hit"
    assert second["key"] == first["key"] and second["sha"] == first["sha"]
    assert second["names"] == first["names"] == {"scale<float>": "_Z5scaleIfEvPT_S0_i"}
    p = run_python(
        "import kcache\n"
        f"a = kcache.compile({src!r}, name_expressions=['scale<float>'])\n"
        "print(a.outcome, 'libnvrtc' in open('/proc/self/maps').read())\n",
        env={"KCACHE_DIR": str(tmp_path / "cache")},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["hit", "False"]


def test_a_forked_child_uses_the_cache_and_the_parent_goes_on(tmp_path: Path) -> None:
    # The parent has a default store with its background writer thread; a
    # child made by fork() must not hang on it, and both keep using the cache.
    code = (
        "import os, multiprocessing as mp, kcache\n"
        f"src = {TEMPLATED + '// fork ' + os.urandom(8).hex()!r}\n"
        "a = kcache.compile(src)\n"
        "def child(q):\n"
        "    b = kcache.compile(src)\n"
        "    c = kcache.compile(src + '// child only')\n"
        "    q.put((b.outcome, b.payload == a.payload, c.outcome))\n"
        "ctx = mp.get_context('fork')\n"
        "q = ctx.Queue()\n"
        "p = ctx.Process(target=child, args=(q,))\n"
        "p.start(); r = q.get(timeout=120); p.join(120)\n"
        "d = kcache.compile(src + '// child only')\n"
        "print(a.outcome, *r, p.exitcode, d.outcome)\n"
    )
    p = run_python(code, env={"KCACHE_DIR": str(tmp_path / "cache")}, timeout=180)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["compiled", "hit", "True", "compiled", "0", "hit"]


def test_a_bad_setting_is_one_warning_and_compiles_go_on_without_the_cache(tmp_path: Path) -> None:
    # A broken cache never breaks a build: Config.load() raises, but the
    # process-wide store used by kcache.compile() warns once and compiles.
    code = (
        "import warnings, kcache\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        f"    a = kcache.compile({TEMPLATED!r})\n"
        f"    b = kcache.compile({TEMPLATED!r})\n"
        "print(a.outcome, b.outcome, kcache.default_store() is None, len(w))\n"
        "print(w[0].message)\n"
        "try:\n"
        "    kcache.Config.load()\n"
        "except kcache.ConfigError:\n"
        "    print('ConfigError')\n"
    )
    p = run_python(code, env={"KCACHE_DIR": str(tmp_path / "cache"), "KCACHE_MAX_SIZE": "garbage"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["compiled_only", "compiled_only", "True", "1"]
    assert "KCACHE_MAX_SIZE" in lines[1] and "garbage" in lines[1]
    assert lines[2] == "ConfigError"
