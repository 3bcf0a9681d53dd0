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
