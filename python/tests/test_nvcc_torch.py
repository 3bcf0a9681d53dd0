"""PyTorch's `torch.utils.cpp_extension.load` with its nvcc compiles through kcache (docs/nvcc.md, "ML
libraries"): both routes, `PYTORCH_NVCC="kcache /path/to/nvcc"` and `kcache run -- python ...`, with the
real torch and nvcc (no GPU: the extension is built, not run). A rebuild of the CUDA source in a new
process runs nvcc zero times and gives the same object. Needs the kcache command and the stand-in from
a build tree (KCACHE_CLI, else build/ci/bin/kcache of this checkout) and nvcc (CUDA_HOME, else
/usr/local/cuda)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.utils.cpp_extension")

ROOT = Path(__file__).resolve().parents[2]
KCACHE = Path(os.environ.get("KCACHE_CLI", ROOT / "build" / "ci" / "bin" / "kcache"))
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
NVCC = CUDA_HOME / "bin" / "nvcc"

KERNEL = r"""
__global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
void add_one_launch(float* x, int n) { add_one<<<(n + 127) / 128, 128>>>(x, n); }
"""

BUILD = r"""
import sys
from torch.utils import cpp_extension
# A plain shared library (is_python_module=False): no binding to compile, only the CUDA source.
cpp_extension.load(name="kcache_nvcc_ext", sources=sys.argv[2:], build_directory=sys.argv[1],
                   extra_cuda_cflags=["-gencode", "arch=compute_90,code=sm_90"], is_python_module=False,
                   verbose=True)
"""


def nvcc_stats(env: dict[str, str]) -> dict[str, int]:
    done = subprocess.run([str(KCACHE), "stats", "--json"], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout).get("nvcc", {})


@pytest.mark.skipif(not KCACHE.exists(), reason=f"no kcache command at {KCACHE} (build the ci preset)")
@pytest.mark.skipif(not NVCC.exists(), reason=f"no nvcc at {NVCC}")
def test_cpp_extension_load_compiles_its_cuda_source_once_through_either_route(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    build = tmp_path / "build"
    build.mkdir()
    env = dict(os.environ, KCACHE_DIR=str(tmp_path / "cache"), CUDA_HOME=str(CUDA_HOME),
               # No ccache or sccache in front of the compilers (torch adds one it finds on PATH).
               TORCH_NO_COMPILER_WRAPPER="1")
    env.pop("PYTORCH_NVCC", None)

    def load(*prefix: str, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run([*prefix, sys.executable, "-c", BUILD, str(build), str(tmp_path / "k.cu")],
                              env=dict(env, **(extra or {})), capture_output=True, text=True, timeout=1200,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    # The environment variable: torch writes it into its ninja file as the nvcc command.
    out = load(extra={"PYTORCH_NVCC": f"{KCACHE} {NVCC}"})
    assert f"{KCACHE} {NVCC}" in out
    assert nvcc_stats(env)["compiles"] == 1
    first = (build / "k.cuda.o").read_bytes()
    # A new process rebuilds the CUDA object: from the cache, nvcc not run.
    (build / "k.cuda.o").unlink()
    load(extra={"PYTORCH_NVCC": f"{KCACHE} {NVCC}"})
    stats = nvcc_stats(env)
    assert (stats["compiles"], stats["hits"]) == (1, 1), stats
    assert (build / "k.cuda.o").read_bytes() == first
    # `kcache run`: torch runs nvcc by its own path; the stand-in sends that exec to the launcher.
    (build / "k.cuda.o").unlink()
    out = load(str(KCACHE), "run", "--")
    assert f"{KCACHE} {NVCC}" not in out
    stats = nvcc_stats(env)
    assert (stats["compiles"], stats["hits"]) == (1, 2), stats
    assert (build / "k.cuda.o").read_bytes() == first
