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


def slow_kernel_source(name: str) -> str:
    """A kernel NVRTC takes a few hundred milliseconds over (40 deep template
    instances; tests/support/slow_kernel.hpp), long enough to race against. A
    new `name` gives a new source, so a cold key."""
    src = (
        "template <int N> __device__ float f(float x) { return f<N - 1>(x * 1.0001f + N); }\n"
        "template <> __device__ float f<0>(float x) { return x; }\n"
        f'extern "C" __global__ void {name}(float* p) {{\n  float v = p[threadIdx.x];\n'
    )
    for i in range(40):
        src += f"  v += f<{100 + i}>(v);\n"
    return src + "  p[threadIdx.x] = v;\n}\n"


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url(tmp_path: Path):
    """A real redis-server on 127.0.0.1 and a free port, for this test only
    (stopped by its pid); yields its redis:// URL. Skips when redis-server is
    not installed (scripts/bootstrap.sh installs it)."""
    import shutil
    import time

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/bootstrap.sh)")
    work = tmp_path / "redis"
    work.mkdir()
    for _ in range(5):  # another process may take the free port first
        port = _free_port()
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(work), "--daemonize", "no", "--protected-mode", "no", "--logfile", str(work / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _redis_ping(port):
            time.sleep(0.02)
        if proc.poll() is None and _redis_ping(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("redis-server did not start; log: " + str(work / "redis.log"))
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
