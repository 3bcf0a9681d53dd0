"""kcache.torch with Triton under Inductor on a real GPU (scripts/device-check.sh gpu).

Host A compiles a model whose kernels are Triton (forward and backward), with kcache.torch and
kcache.triton turned on from the environment alone (KCACHE_TORCH=1 KCACHE_TRITON=1) and
Inductor's worker pool on: the workers compile Triton's kernels through kcache.triton, the FX
graph entries carry the kernels (Triton's layout kept for Inductor's bundler). Host B (a new
TORCHINDUCTOR_CACHE_DIR, TMPDIR and Triton directory over the same kcache directory) compiles
no Triton kernel, lowers no graph, launches the kernels with Inductor's static launcher, and
gets the same outputs bit for bit.

Skips without a usable CUDA device; KCACHE_REQUIRE_GPU=1 turns the skip into a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_torch import entries, finish, host, start


@pytest.fixture(scope="module")
def gpu() -> None:
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available(); "
                            "print(torch.cuda.get_device_name(0))"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        why = "no usable CUDA device for torch: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
        if os.environ.get("KCACHE_REQUIRE_GPU") == "1":
            pytest.fail(f"KCACHE_REQUIRE_GPU=1 but {why}")
        pytest.skip(why)


def test_a_new_host_compiles_no_triton_kernel_and_launches_statically(gpu: None, tmp_path: Path) -> None:
    store = tmp_path / "kcache"
    on = {"KCACHE_TORCH": "1", "KCACHE_TRITON": "1", "TRITON_DEFAULT_FP_FUSION": "1"}
    a = finish(start(host(tmp_path, "a", store, **on), "--model", "gpu", "--activate", "env", "--threads", "4"),
               timeout=900)
    assert a["installed"] is True and a["lowerings"] == 2, a
    assert a["bundler"].get("triton_bundler_save_kernel", 0) > 0, a["bundler"]  # the FX entries carry kernels
    kinds = {k: len(v) for k, v in entries(store).items()}
    assert kinds.get("triton-group", 0) > 0 and kinds["torch-fx"] == 2, kinds  # the workers used kcache.triton
    b = finish(start(host(tmp_path, "b", store, **on), "--model", "gpu", "--activate", "env", "--threads", "1"),
               timeout=900)
    assert (b["lowerings"], b["fx_hit"], b["aot_hit"]) == (0, 2, 1), b
    assert b["triton"]["compiles"] == 0, b["triton"]
    assert b["bundler"].get("triton_bundler_load_static_autotuner", 0) > 0, b["bundler"]  # the static launcher
    assert b["digest"] == a["digest"]
    for name in ("autotune", "bundled-autotune"):  # reported: which of them this model exercised
        print(name, "A:", a["kstats"].get(name), "B:", b["kstats"].get(name))
    if a["kstats"].get("bundled-autotune", {}).get("put"):
        assert b["kstats"]["bundled-autotune"]["hit"] >= 1, b["kstats"]
