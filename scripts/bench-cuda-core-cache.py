#!/usr/bin/env python3
"""Times a warm in-process hit of cuda.core's program cache for the CUB corpus kernel.

The figure to hold kcache's BM_InProcessHit/2 (bench/bench_headers.cpp) against:
the documented cuda.core way for a compile with an include path --
make_program_cache_key() (the caller must pass an extra_digest; cuda.core keys no
header, so a constant stands in here) + InMemoryProgramCache lookup +
ObjectCode.from_cubin(). No GPU is needed: nothing is loaded.

    python3 -m venv .venv-bench && .venv-bench/bin/pip install cuda-core cuda-bindings
    .venv-bench/bin/python scripts/bench-cuda-core-cache.py [iterations] [repetitions]

Prints one JSON line: the median over repetitions of the mean microseconds per hit (wall
clock, and CPU time of the process, which a loaded machine inflates less).
"""
import json
import os
import statistics
import sys
import time

from cuda.core import ObjectCode, ProgramOptions
from cuda.core.utils import InMemoryProgramCache, make_program_cache_key

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with open(os.path.join(ROOT, "bench", "corpus", "heavy_cub.cu")) as f:
        source = f.read()
    options = ProgramOptions(arch="sm_90", include_path=[CUDA + "/include/cccl", CUDA + "/include"])
    cache = InMemoryProgramCache()

    def key():
        return make_program_cache_key(
            code=source, code_type="c++", options=options, target_type="cubin", extra_digest=b"headers"
        )

    # A stand-in payload of the CUB cubin's size: the hit path does not look inside.
    cache[key()] = b"\x7fELF" + bytes(150 * 1024)
    means = []
    cpu_means = []
    for _ in range(repetitions):
        start = time.perf_counter()
        cpu_start = time.process_time()
        for _ in range(iterations):
            data = cache.get(key())
            obj = ObjectCode.from_cubin(data)
        cpu_means.append((time.process_time() - cpu_start) / iterations * 1e6)
        means.append((time.perf_counter() - start) / iterations * 1e6)
    assert obj is not None
    print(json.dumps({"bench": "cuda.core InMemoryProgramCache hit", "kernel": "heavy_cub.cu",
                      "us": round(statistics.median(means), 2), "cpu_us": round(statistics.median(cpu_means), 2),
                      "runs": [round(m, 2) for m in means]}))


if __name__ == "__main__":
    main()
