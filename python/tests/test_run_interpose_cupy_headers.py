"""`kcache run` with CuPy kernels over CuPy's own headers (<cupy/carray.cuh>, <cupy/complex.cuh>): CuPy
names each program /tmp/tmpXXXXXXXX/kern.cu in a fresh temporary directory, and the CCCL it bundles
names __builtin_FILE, so only evidence can say that the directory does not reach the output
(docs/keys.md, "The program name", "Left out by evidence"). The first process compiles each kernel
and a probe under another directory; a second process (new temporary directories) hits, and so does a
second cache directory through a real redis-server (a second host). A kernel whose output does depend
on the directory (`__FILE__` formed by pasting) compiles again in every process, with its own name in
its output. CuPy's real compiler path (compile_using_nvrtc, CuPy's own options); no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))

PROGRAM = r"""
import hashlib, json, sys
from cupy.cuda import compiler
from cupy._core import core
# No GPU here: only the device query that picks the arch is replaced; the rest is CuPy's path
# (a kern.cu in a temporary directory, --device-as-default-execution-space, --pch).
compiler._get_arch_for_options_for_nvrtc = lambda arch=None: ("-arch=sm_90", "cubin")
options = core.assemble_cupy_compiler_options(())
elementwise = '''#include <cupy/complex.cuh>
#include <cupy/carray.cuh>
#include <cupy/atomics.cuh>
extern "C" __global__ void cupy_scale(CArray<float, 1, true, true> x, CArray<float, 1, true, true> y,
                                      CIndexer<1> _ind) {
  CUPY_FOR(i, _ind.size()) { _ind.set(i); y[_ind.get()] = x[_ind.get()] * 2.5f + 1.0f; }
}
'''
raw_complex = '''#include <cupy/complex.cuh>
extern "C" __global__ void cexp(const complex<float>* x, complex<float>* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = exp(x[i] * complex<float>(0.5f, 1.0f));
}
'''
pasted = '''#include <cupy/carray.cuh>
#define CAT(a, b) a##b
__device__ const char* where;
extern "C" __global__ void w(int* p) { where = CAT(__FI, LE__); p[0] = sizeof(CAT(__FI, LE__)); }
'''
out = {}
for name, src in (("elementwise", elementwise), ("raw_complex", raw_complex), ("pasted", pasted)):
    cubin = bytes(compiler.compile_using_nvrtc(src, options=options, arch="90")[0])
    out[name] = hashlib.sha256(cubin).hexdigest()
    if name == "pasted":
        out["pasted_names_tmp"] = b"/tmp/" in cubin
print(json.dumps(out))
"""


def _run(cache: Path, log: Path, env_extra: dict[str, str], *prefix: str) -> dict:
    env = dict(os.environ, KCACHE_DIR=str(cache), KCACHE_INTERPOSE_LOG=str(log), **env_extra)
    if "KCACHE_REMOTE" not in env_extra:
        env.pop("KCACHE_REMOTE", None)
    done = subprocess.run([*prefix, sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "kcache: warning" not in done.stderr, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _shared(out: dict) -> dict:
    """The digests of the kernels whose output does not name the directory."""
    return {k: out[k] for k in ("elementwise", "raw_complex")}


def _events(log: Path) -> tuple[int, int, list[str]]:
    """(hits, compiles stored or not, the keys hit) of the interposer's log, which is then removed."""
    text = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    hits = [line.split()[-1] for line in text.splitlines() if " nvrtc hit " in line]
    return len(hits), text.count(" nvrtc compile ") + text.count(" nvrtc uncached "), hits


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
def test_cupy_header_kernels_hit_in_a_new_process_and_on_a_new_host(tmp_path: Path, redis_url: str) -> None:
    pytest.importorskip("cupy")
    log = tmp_path / "log"
    remote = {"KCACHE_REMOTE": redis_url}
    try:
        plain = _run(tmp_path / "plain", log, {})
    except AssertionError as e:  # CuPy that needs a driver or device here
        pytest.skip(f"CuPy's compiler does not run without a GPU here: {e}")
    log.unlink(missing_ok=True)
    assert plain["pasted_names_tmp"], "the pasted __FILE__ names CuPy's temporary directory"

    # A: compiles all three (each with its probe compile under another directory).
    first = _run(tmp_path / "a", log, remote, str(KCACHE), "run", "--")
    # The same bytes as without kcache, except where the output names the (new) directory.
    assert _shared(first) == _shared(plain) and first["pasted_names_tmp"]
    assert _events(log)[:2] == (0, 3)
    # B: a new process on the same cache, new temporary directories: the two CuPy-header kernels
    # hit; the one whose output names the directory compiles again, with its own bytes.
    second = _run(tmp_path / "a", log, remote, str(KCACHE), "run", "--")
    assert _shared(second) == _shared(plain) and second["pasted_names_tmp"]
    assert second["pasted"] != first["pasted"], "the pasted __FILE__ names this process's directory"
    assert _events(log)[:2] == (2, 1)
    # C: a second host (an empty cache directory) with the same redis: the same two hit.
    third = _run(tmp_path / "c", log, remote, str(KCACHE), "run", "--")
    assert _shared(third) == _shared(plain) and third["pasted"] not in (first["pasted"], second["pasted"])
    hits, compiles, keys = _events(log)
    assert (hits, compiles) == (2, 1)

    # The entries the hits came from (now also in C's cache directory) leave the directory out by
    # evidence: the basename is keyed, with the field that says so.
    for key in keys:
        shown = subprocess.run([str(KCACHE), "show", key], env=dict(os.environ, KCACHE_DIR=str(tmp_path / "a")),
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        fields = {f["name"]: f["value"] for f in json.loads(shown.stdout)["key_record"]["fields"]}
        assert fields["name"] == "kern.cu", fields
        assert fields["name_directory"] == "left out (same output under another directory)", fields
