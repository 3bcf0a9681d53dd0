"""GPU tests: kernels compiled through kcache run on a real device, results checked.

Each test runs its GPU work in new Python processes (the first compiles, the
second must hit and run what the cache served), so a hit is checked the way a
user meets it: bytes from the store, loaded by the driver, launched.

Every test skips without a usable CUDA driver and device (this machine and CI
have none); KCACHE_REQUIRE_GPU=1 (scripts/device-check.sh, on a lent GPU
machine) turns those skips into failures, so a run meant for the GPU cannot
pass by skipping.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import TEMPLATED, run_python


def _skip_or_fail(why: str) -> None:
    if os.environ.get("KCACHE_REQUIRE_GPU") == "1":
        pytest.fail(f"KCACHE_REQUIRE_GPU=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def gpu() -> None:
    probe = run_python(
        "from cuda.core import Device\n"
        "d = Device(0)\n"
        "d.set_current()\n"
        "print(d.name)\n",
        timeout=120,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        _skip_or_fail(f"no usable CUDA driver/GPU here: {last}")


# Compiles scale<float> through kcache (kcache.compile: its outcome is
# reported) and through the cuda.core drop-in (kcache.cuda_core.compile: an
# ObjectCode with its symbol mapping), launches both with cuda.core on the
# device and checks every element. Prints one JSON line.
_CUDA_CORE_RUN = r"""
import json, sys
import numpy as np
import kcache, kcache.cuda_core as kcc
from cuda.bindings import driver
from cuda.core import Device, LaunchConfig, ObjectCode, ProgramOptions, launch

SRC = sys.argv[1]
d = Device(0)
d.set_current()
stream = d.create_stream()
major, minor = d.compute_capability
arch = f"sm_{major}{minor}"
store = kcache.open_store(kcache.Config.load(put="sync"))
n = 4096

def run(kernel):
    host = np.arange(n, dtype=np.float32)
    buf = d.allocate(n * 4, stream=stream)
    stream.sync()
    (err,) = driver.cuMemcpyHtoD(int(buf.handle), host, n * 4)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    launch(stream, LaunchConfig(grid=(n + 255) // 256, block=256), kernel, buf, np.float32(3.0), np.int32(n))
    stream.sync()
    out = np.zeros(n, dtype=np.float32)
    (err,) = driver.cuMemcpyDtoH(out, int(buf.handle), n * 4)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    buf.close(stream)
    return bool(np.array_equal(out, host * np.float32(3.0)))

art = kcache.compile(SRC, target="cubin", arch=arch, name_expressions=["scale<float>"], store=store)
mod = ObjectCode.from_cubin(art.payload, symbol_mapping={"scale<float>": art.lowered_names["scale<float>"].encode()})
plain_ok = run(mod.get_kernel("scale<float>"))
obj = kcc.compile(SRC, ProgramOptions(arch=arch, std="c++17"), "cubin", name_expressions=["scale<float>"], store=store)
drop_in_ok = run(obj.get_kernel("scale<float>"))
print(json.dumps({"arch": arch, "outcome": art.outcome, "plain_ok": plain_ok, "drop_in_ok": drop_in_ok,
                  "entries": len(store.list())}))
"""


def test_kernels_from_the_cache_run_on_the_device(gpu: None, tmp_path: Path) -> None:
    env = {"KCACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        p = run_python(_CUDA_CORE_RUN.replace("sys.argv[1]", repr(TEMPLATED)), env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["outcome"] == "compiled", first
    assert second["outcome"] == "hit", second
    for r in runs:
        assert r["plain_ok"] and r["drop_in_ok"], r
    assert first["entries"] == second["entries"] >= 2, runs


# A Triton kernel launched on the device with kcache as Triton's cache: the
# compile (and the launcher Triton builds for a real launch) go through
# kcache.triton. Prints one JSON line with the listener's counts.
_TRITON_RUN = r"""
import json
import kcache.triton
kcache.triton.install()
import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2 + tl.load(y + offs, mask=mask), mask=mask)

counts = {"compiles": 0, "hits": 0}
def listener(**kw):
    counts["hits" if kw["cache_hit"] else "compiles"] += 1
triton.knobs.compilation.listener = listener
n = 100_000
x = torch.arange(n, device="cuda", dtype=torch.float32)
y = torch.full((n,), 7.0, device="cuda", dtype=torch.float32)
out = torch.empty_like(x)
add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
torch.cuda.synchronize()
ok = bool(torch.equal(out, x * 2 + y))
print(json.dumps({"ok": ok, "triton": triton.__version__, **counts}))
"""


def test_a_triton_kernel_from_kcache_runs_on_the_device(gpu: None, tmp_path: Path) -> None:
    pytest.importorskip("triton")
    if run_python("import torch\nassert torch.cuda.is_available()\n").returncode != 0:
        _skip_or_fail("no torch with CUDA here (the Triton launch needs its tensors)")
    env = {
        "KCACHE_DIR": str(tmp_path / "cache"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton-own"),  # must stay empty: kcache is the cache
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
    }
    # Triton reads a @triton.jit function's source from its file: the program is a file.
    script = tmp_path / "triton_on_device.py"
    script.write_text(_TRITON_RUN)
    runs = []
    for _ in range(2):
        p = run_python(f"import runpy\nrunpy.run_path({str(script)!r}, run_name='__main__')\n", env=env, timeout=600)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["ok"] and second["ok"], runs
    assert first["compiles"] == 1 and first["hits"] == 0, first
    assert second["compiles"] == 0 and second["hits"] == 1, second
    own = tmp_path / "triton-own"
    assert not own.exists() or not any(own.rglob("*.cubin")), "Triton wrote its own cache beside kcache"
