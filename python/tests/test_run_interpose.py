"""`kcache run -- python ...`: unmodified cuda.core code (no `cache=`) through the stand-in JIT
libraries (docs/run.md). Needs the kcache command and the stand-in from a build tree
(KCACHE_CLI, else build/ci/bin/kcache of this checkout); no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.core")

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))

# Unmodified cuda.core code: it knows nothing of kcache.
PROGRAM = r"""
import hashlib, sys
from cuda.core import Program, ProgramOptions
src = ("template <typename T> __global__ void axpy(T a, T* x, T* y, int n) {"
       " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n"
       "extern \"C\" __global__ void tag(int* p) { p[0] = %d; }\n")
for i in range(2):
    cubin = Program(src % i, "c++", ProgramOptions(arch="sm_90", std="c++17")).compile(
        "cubin", name_expressions=("axpy<float>", "axpy<double>"))
    ltoir = Program(src % i, "c++", ProgramOptions(arch="sm_90", link_time_optimization=True)).compile("ltoir")
    print(hashlib.sha256(bytes(cubin.code)).hexdigest(), hashlib.sha256(bytes(ltoir.code)).hexdigest())
"""


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_cuda_core_program_compile_under_kcache_run_is_byte_equal_and_hits(tmp_path: Path) -> None:
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), KCACHE_INTERPOSE_LOG=str(tmp_path / "log"))

    def run(*prefix: str) -> str:
        done = subprocess.run([*prefix, sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert "kcache: warning" not in done.stderr, done.stderr
        return done.stdout

    plain = run()
    log = tmp_path / "log"
    cold = run(str(KCACHE), "run", "--")
    assert cold == plain
    assert log.read_text().count(" nvrtc compile ") == 4
    log.unlink()
    warm = run(str(KCACHE), "run", "--")
    assert warm == plain
    text = log.read_text()
    assert text.count(" nvrtc hit ") == 4 and " nvrtc compile " not in text, text


# A fork after a compile: the child compiles through its own cache state (the
# parent's background threads are not in it) and exits cleanly; its entry is kept.
FORK = r"""
import os, sys
from cuda.core import Program, ProgramOptions
src = "extern \"C\" __global__ void k%d(int* p) { p[0] = %d; }\n"
first = bytes(Program(src % (1, 1), "c++", ProgramOptions(arch="sm_90")).compile("cubin").code)
pid = os.fork()
if pid == 0:
    again = bytes(Program(src % (1, 1), "c++", ProgramOptions(arch="sm_90")).compile("cubin").code)
    other = bytes(Program(src % (2, 2), "c++", ProgramOptions(arch="sm_90")).compile("cubin").code)
    os._exit(0 if again == first and len(other) > 0 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_fork_after_an_interposed_compile(tmp_path: Path) -> None:
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), KCACHE_INTERPOSE_LOG=str(tmp_path / "log"))
    for _ in range(2):
        done = subprocess.run([str(KCACHE), "run", "--", sys.executable, "-c", FORK], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    lines = (tmp_path / "log").read_text().splitlines()
    # First run: parent compiles k1, child hits k1 (memory or disk) and compiles k2 (os._exit skips
    # the exit flush, so k2 may not be on disk). Second run: k1 is a hit in both processes.
    assert sum(" compile " in line for line in lines[:3]) >= 2, lines
    assert all(" hit " in line for line in lines[3:5]), lines
