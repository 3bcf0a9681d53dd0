"""Shared fixtures: every test session gets its own cache and config directory.

The tests use the real NVRTC / nvJitLink / NVVM of the CUDA toolkit
(KCACHE_CUDA_HOME, CUDA_HOME or /usr/local/cuda) and the real cuda-core and
cuda-bindings from PyPI. No GPU is needed: nothing is loaded on a device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Before kcache is imported anywhere: the default store of this session.
_session_dir = Path(tempfile.mkdtemp(prefix="kcache-pytest-"))
os.environ["KCACHE_DIR"] = str(_session_dir / "default-cache")
os.environ["XDG_CONFIG_HOME"] = str(_session_dir / "config")
os.environ.pop("KCACHE_CONFIG", None)
os.environ.pop("KCACHE_DISABLE", None)

import kcache  # noqa: E402

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

TEMPLATED = r"""
template <class T> __global__ void scale(T* x, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
"""


@pytest.fixture
def config(tmp_path: Path) -> kcache.Config:
    """Settings for a fresh cache under tmp_path; puts are synchronous."""
    return kcache.Config.load(cache_dir=tmp_path / "cache", put="sync")


@pytest.fixture
def store(config: kcache.Config):
    s = kcache.open_store(config)
    yield s
    s.close()


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a new Python process (the same interpreter) and returns it."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout
    )
