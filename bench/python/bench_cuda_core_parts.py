"""Where a warm `kcache.cuda_core.compile` hit of the CUB kernel spends its time.

Times, in one process, the whole call and its parts: cuda.core's option
formatting (`ProgramOptions.as_bytes`, which cuda.core's own
`make_program_cache_key` pays too) and kcache's memo of it
(`_cuda_core_options`, what `kcache.cuda_core.compile` calls), kcache's `_compile` (key from the
in-process derivation memo, the memory-tier lookup, the artifact), `.payload`
(the bytes object) and `ObjectCode.from_cubin`. Best of 5 repeats, microseconds.

    .venv/bin/python bench/python/bench_cuda_core_parts.py [N]

The same process also times cuda.core's `InMemoryProgramCache` pattern for this
kernel (scripts/bench-cuda-core-cache.py: `make_program_cache_key` with an
`extra_digest`, the lookup, `ObjectCode.from_cubin`), the two taking turns repeat
by repeat, and prints the ratio of the best repeats: the machine is shared.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import timeit
from pathlib import Path

import kcache
import kcache.cuda_core as kcc
from cuda.core import ObjectCode, ProgramOptions
from cuda.core.utils import InMemoryProgramCache, make_program_cache_key
from kcache import _kcache, _store_for

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    opts = ProgramOptions(arch="sm_90", name="heavy_cub.cu", include_path=[home + "/include/cccl", home + "/include"])
    src = (ROOT / "bench" / "corpus" / "heavy_cub.cu").read_text()
    store = kcache.open_store(kcache.Config.load(cache_dir=tempfile.mkdtemp(prefix="kcache-parts-"), put="sync"))
    kcc.compile(src, opts, "cubin", store=store)  # the cold compile
    st = _store_for(store, True)
    nv = [o.decode() for o in opts.as_bytes("nvrtc", "cubin")]
    art = _kcache._compile(st, src, "cubin", "", nv, [], None, (), opts.name, None, "cuda.core")
    payload = art.payload

    def best(f) -> float:
        return round(min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6, 2)

    def versus_in_memory(source: str, options: ProgramOptions, digest: bytes | None) -> tuple[float, float]:
        """kcache.cuda_core.compile against cuda.core's InMemoryProgramCache pattern, warm, best of 7 turns."""
        cubin = kcc.compile(source, options, "cubin", store=store).code
        memory = InMemoryProgramCache()

        def cuda_core_key() -> bytes:
            return make_program_cache_key(code=source, code_type="c++", options=options, target_type="cubin",
                                          extra_digest=digest)

        memory[cuda_core_key()] = cubin

        def cuda_core_hit() -> object:
            return ObjectCode.from_cubin(memory.get(cuda_core_key()), name=options.name)

        def kcache_hit() -> object:
            return kcc.compile(source, options, "cubin", store=store)

        # Turn by turn: a burst of load on the shared machine lands on both.
        turns: dict[str, list[float]] = {"kcache": [], "cuda_core": []}
        for _ in range(7):
            for label, f in (("kcache", kcache_hit), ("cuda_core", cuda_core_hit)):
                turns[label].append(timeit.timeit(f, number=n) / n * 1e6)
        return round(min(turns["kcache"]), 2), round(min(turns["cuda_core"]), 2)

    others = {}
    for kernel in ("trivial", "medium"):
        k_us, c_us = versus_in_memory((ROOT / "bench" / "corpus" / f"{kernel}.cu").read_text(),
                                      ProgramOptions(arch="sm_90", name=f"{kernel}.cu"), None)
        others[kernel] = {"kcache_us": k_us, "cuda_core_in_memory_us": c_us,
                          "in_memory_over_kcache": round(c_us / k_us, 2)}
    # cuda.core keys no header: with include paths it wants an extra_digest from the caller.
    whole, in_memory = versus_in_memory(src, opts, b"headers")

    memo = _kcache._cuda_core_options
    print(json.dumps({
        **others,
        "served_from": art.served_from,
        "payload_bytes": len(payload),
        "whole_us": whole,
        "cuda_core_in_memory_us": in_memory,
        "in_memory_over_kcache": round(in_memory / whole, 2),
        "options_as_bytes_us": best(lambda: opts.as_bytes("nvrtc", "cubin")),
        "options_remembered_us": best(lambda: memo(opts, "nvrtc", "cubin")),
        "kcache_compile_us": best(lambda: _kcache._compile(st, src, "cubin", "", nv, [], None, (), opts.name, None,
                                                           "cuda.core")),
        "payload_us": best(lambda: art.payload),
        "from_cubin_us": best(lambda: ObjectCode.from_cubin(payload, name=opts.name)),
    }))
    store.close()


if __name__ == "__main__":
    main()
