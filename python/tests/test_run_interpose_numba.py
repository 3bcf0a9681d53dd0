"""`kcache run -- python ...` with unmodified Numba-CUDA code: `numba.cuda.compile_ptx` compiles
through libNVVM, which the stand-in serves from the cache (docs/run.md). No GPU needed. Runs
where numba-cuda is installed (the `test` extra installs it); needs the kcache command and the
stand-in from a build tree (KCACHE_CLI, else build/ci/bin/kcache of this checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))

PROGRAM = r"""
import hashlib
from numba import cuda, float32

def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]

ptx, _ = cuda.compile_ptx(axpy, (float32[:], float32, float32[:], float32[:]), cc=(9, 0))
print(hashlib.sha256(ptx.encode()).hexdigest(), len(ptx))
"""


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_numba_compile_ptx_under_kcache_run_is_byte_equal_and_hits(tmp_path: Path) -> None:
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), KCACHE_INTERPOSE_LOG=str(tmp_path / "log"))
    env.setdefault("CUDA_HOME", "/usr/local/cuda")

    def run(*prefix: str) -> str:
        done = subprocess.run([*prefix, sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    plain = run()
    assert run(str(KCACHE), "run", "--") == plain
    assert (tmp_path / "log").read_text().count(" nvvm compile ") == 1
    (tmp_path / "log").unlink()
    assert run(str(KCACHE), "run", "--") == plain
    text = (tmp_path / "log").read_text()
    assert " nvvm hit " in text and " compile " not in text, text
