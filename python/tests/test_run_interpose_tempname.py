"""`kcache run` with a JIT user that names each program after a fresh temporary directory, as
CuPy does (cupy/cuda/compiler.py writes `kern.cu` into a `tempfile.TemporaryDirectory()`, leaves
it, and passes that path as NVRTC's program name): the same kernel in a second process hits,
because the program name's directory is keyed only where the output can depend on it
(docs/keys.md, "The program name"); a kernel that expands `__FILE__` still compiles again and
gets its own name. Plain ctypes over libnvrtc; no GPU. A CuPy case runs when CuPy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))

# What CuPy's _compile_using_nvrtc does, with ctypes: the program name is a path in a temporary
# directory that no longer exists when NVRTC runs.
PROGRAM = r"""
import ctypes, hashlib, os, sys, tempfile
nvrtc = ctypes.CDLL("libnvrtc.so.13")
def compile(src):
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "kern.cu")
        with open(path, "w") as f:
            f.write(src)
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), path.encode(), 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(b"-arch=compute_90")
    assert nvrtc.nvrtcCompileProgram(prog, 1, opts) == 0
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetPTX(prog, buf)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.raw, path
plain = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= %s; }\n'
for i in range(3):
    ptx, _ = compile(plain % (i + 2))
    print(hashlib.sha256(ptx).hexdigest())
ptx, path = compile('__device__ const char* where;\nextern "C" __global__ void w(int* p) { where = __FILE__; }\n')
print("file", ", ".join(str(b) for b in path.encode()).encode() in ptx)
"""


def _run(tmp_path: Path, program: str, *prefix: str) -> str:
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), KCACHE_INTERPOSE_LOG=str(tmp_path / "log"))
    done = subprocess.run([*prefix, sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kcache: warning" not in done.stderr, done.stderr
    return done.stdout


def _nvrtc_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvrtc.so.13")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_kernel_named_after_a_fresh_temporary_directory_hits_in_the_next_process(tmp_path: Path) -> None:
    if not _nvrtc_loads():
        if os.environ.get("KCACHE_REQUIRE_TOOLKIT") == "1":
            pytest.fail("libnvrtc.so.13 does not load (KCACHE_REQUIRE_TOOLKIT=1)")
        pytest.skip("libnvrtc.so.13 does not load")
    log = tmp_path / "log"
    plain = _run(tmp_path, PROGRAM)
    first = _run(tmp_path, PROGRAM, str(KCACHE), "run", "--")
    assert first.splitlines()[:3] == plain.splitlines()[:3]
    assert log.read_text().count(" nvrtc compile ") == 4
    log.unlink()
    second = _run(tmp_path, PROGRAM, str(KCACHE), "run", "--")
    assert second.splitlines()[:3] == plain.splitlines()[:3]
    text = log.read_text()
    # The three plain kernels hit although their program names are new paths; the one that
    # expands __FILE__ compiles again (its name is in its output, checked by the program).
    assert text.count(" nvrtc hit ") == 3 and text.count(" nvrtc compile ") == 1, text
    assert second.splitlines()[3] == "file True", second


CUPY_PROGRAM = r"""
import hashlib
from cupy.cuda import compiler
# No GPU here: only the device query that picks the arch is replaced; the rest is CuPy's path
# (a kern.cu in a temporary directory, --device-as-default-execution-space, --pch).
compiler._get_arch_for_options_for_nvrtc = lambda arch=None: ("-arch=sm_90", "cubin")
src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 3; }\n'
print(hashlib.sha256(bytes(compiler.compile_using_nvrtc(src, arch="90")[0])).hexdigest())
"""


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_cupy_compile_using_nvrtc_hits_in_the_next_process(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    log = tmp_path / "log"
    try:
        first = _run(tmp_path, CUPY_PROGRAM, str(KCACHE), "run", "--")
    except AssertionError as e:  # CuPy that needs a driver or device here
        pytest.skip(f"CuPy's compiler does not run without a GPU here: {e}")
    assert " nvrtc compile " in log.read_text()
    log.unlink()
    assert _run(tmp_path, CUPY_PROGRAM, str(KCACHE), "run", "--") == first
    text = log.read_text()
    assert " nvrtc hit " in text and " nvrtc compile " not in text, text
