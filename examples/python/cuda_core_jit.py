"""A cuda.core compile through kcache, run by scripts/run-examples.sh twice:
cold (NVRTC compiles), then warm in a new process (a verified hit).

    python examples/python/cuda_core_jit.py

The one-line switch: pass ``cache=kcache.cuda_core.ProgramCache()`` to
``Program.compile``. Compiles that cuda.core cannot key itself (an include
path, name expressions) go through ``kcache.cuda_core.compile``.
No GPU is needed to compile.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

t_start = time.perf_counter()

import kcache  # noqa: E402
import kcache.cuda_core  # noqa: E402
from cuda.core import Program, ProgramOptions  # noqa: E402

kernels = Path(__file__).resolve().parent.parent / "plans" / "kernels"
store = kcache.default_store()
assert store is not None, "the kcache cache could not be opened"
hits_before = store.stats()["hits"]

# 1. cuda.core's own Program.compile, with kcache as its cache.
saxpy = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
t0 = time.perf_counter()
obj = Program(saxpy, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=kcache.cuda_core.ProgramCache())
t1 = time.perf_counter()
hit = store.stats()["hits"] > hits_before
print(f"Program.compile(cache=ProgramCache()): {'hit' if hit else 'compiled'} in {(t1 - t0) * 1e3:.1f} ms, "
      f"{len(obj.code)} bytes, sha256 {hashlib.sha256(bytes(obj.code)).hexdigest()[:16]}")

# 2. A kernel with a header on disk and a name expression: kcache's full keys.
source = (kernels / "reduce.cu").read_text()
options = ProgramOptions(arch="sm_90", include_path=[str(kernels)], name="reduce.cu")
hits_before = store.stats()["hits"]
t0 = time.perf_counter()
obj2 = kcache.cuda_core.compile(source, options, "cubin", source_path=kernels / "reduce.cu")
t1 = time.perf_counter()
hit = store.stats()["hits"] > hits_before
print(f"kcache.cuda_core.compile(reduce.cu, include path): {'hit' if hit else 'compiled'} in "
      f"{(t1 - t0) * 1e3:.1f} ms, {len(obj2.code)} bytes, "
      f"sha256 {hashlib.sha256(bytes(obj2.code)).hexdigest()[:16]}")
print(f"whole process: {(time.perf_counter() - t_start) * 1e3:.0f} ms")
