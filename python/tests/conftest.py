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


def start_redis(work: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """A real redis-server on 127.0.0.1 and a free port, its files in `work` (made), started
    with the options `extra`; returns it and its port once it answers PING. Fails the test
    when it does not start; skips it when redis-server is not installed
    (scripts/bootstrap.sh installs it). Stop it with stop_process()."""
    import shutil
    import time

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/bootstrap.sh)")
    work.mkdir(parents=True, exist_ok=True)
    for _ in range(5):  # another process may take the free port first
        port = _free_port()
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(work), "--daemonize", "no", "--protected-mode", "no", "--logfile", str(work / "redis.log"),
             *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _redis_ping(port):
            time.sleep(0.02)
        if proc.poll() is None and _redis_ping(port):
            return proc, port
        stop_process(proc)
    pytest.fail("redis-server did not start; log: " + str(work / "redis.log"))


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Stops a server a fixture started (by its pid): SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def redis_url(tmp_path: Path):
    """A real redis-server (start_redis), for this test only; yields its redis:// URL."""
    proc, port = start_redis(tmp_path / "redis")
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.fixture
def redis_cluster_url(tmp_path: Path):
    """A real Redis Cluster of three masters (no replicas) for this test only, made with
    `redis-cli --cluster create` as tests/support/redis_cluster.cpp does; yields its
    redis+cluster:// URL (every node a seed) once every node reports cluster_state:ok."""
    import shutil
    import time

    nodes: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for i in range(3):
            work = tmp_path / f"cluster-node{i}"
            nodes.append(start_redis(work, "--cluster-enabled", "yes", "--cluster-config-file",
                                     str(work / "nodes.conf"), "--cluster-node-timeout", "5000"))
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.fail("redis-cli is missing beside redis-server (scripts/bootstrap.sh installs redis-tools)")
        made = subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{port}" for _, port in nodes),
                               "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stdout + made.stderr
        deadline = time.monotonic() + 30
        while True:
            infos = [subprocess.run([cli, "-p", str(port), "CLUSTER", "INFO"], capture_output=True, text=True).stdout
                     for _, port in nodes]
            if all("cluster_state:ok" in info for info in infos):
                break
            assert time.monotonic() < deadline, f"the cluster did not reach cluster_state:ok: {infos}"
            time.sleep(0.05)
        yield "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for _, port in nodes)
    finally:
        for proc, _ in nodes:
            stop_process(proc)


@pytest.fixture
def http_url(tmp_path: Path):
    """A real nginx serving WebDAV PUT/GET/DELETE on 127.0.0.1 and a free port (the
    configuration of tests/support/nginx_server.cpp) for this test only; yields the
    http:// URL of its cache. Skips when nginx is not installed (scripts/bootstrap.sh)."""
    import time

    nginx = "/usr/sbin/nginx"
    if not os.access(nginx, os.X_OK):
        pytest.skip(f"{nginx} is missing (scripts/bootstrap.sh installs nginx-light)")
    work = tmp_path / "nginx"
    (work / "data" / "cache").mkdir(parents=True)
    (work / "tmp").mkdir()
    for _ in range(3):  # another process may take the free port first
        port = _free_port()
        d = str(work)
        (work / "nginx.conf").write_text(
            f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n"
            f"error_log {d}/error.log warn;\nevents {{ worker_connections 64; }}\nhttp {{\n"
            f"  access_log off;\n  client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n"
            f"  fastcgi_temp_path {d}/tmp/fcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n"
            f"  client_max_body_size 512m;\n  server {{\n    listen 127.0.0.1:{port};\n    root {d}/data;\n"
            "    location / {\n      dav_methods PUT DELETE;\n      create_full_put_path on;\n"
            "      dav_access user:rw;\n    }\n  }\n}\n")
        proc = subprocess.Popen([nginx, "-e", f"{d}/error.log", "-p", d, "-c", f"{d}/nginx.conf"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _answers(port):
            time.sleep(0.02)
        if proc.poll() is None and _answers(port):
            break
        stop_process(proc)
    else:
        pytest.fail("nginx did not start; log: " + str(work / "error.log"))
    try:
        yield f"http://127.0.0.1:{port}/cache"
    finally:
        stop_process(proc)


def _answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def kcache_cli() -> str | None:
    """The kcache command the tests run (KCACHE_CLI, else build/ci/bin/kcache), or None when it is not
    built; with KCACHE_REQUIRE_TOOLKIT set (CI), a missing command fails the test instead."""
    repo = Path(__file__).resolve().parents[2]
    path = os.environ.get("KCACHE_CLI") or str(repo / "build" / "ci" / "bin" / "kcache")
    if os.access(path, os.X_OK):
        return path
    if os.environ.get("KCACHE_REQUIRE_TOOLKIT"):
        pytest.fail(f"the kcache command is not built at {path} (cmake --build --preset ci)")
    return None
