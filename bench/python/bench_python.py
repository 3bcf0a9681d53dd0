"""Benchmarks of the Python package (docs/performance.md, "In-process hits", "cuda.core").

    .venv/bin/python bench/python/bench_python.py [--quick] [--json out.json]

Every figure is a median over interleaved rounds, with its baseline measured
in the same run; the ratios are what to compare between machines.

1. In-process hit of a 16 KiB, 256 KiB and 4 MiB entry: kcache's store
   (on-disk tier only, as bytes and as a zero-copy view, and with the memory
   tier), kcache.cuda_core.ProgramCache,
   cuda.core's FileStreamProgramCache.get, and a raw open().read() floor.
2. Program.compile(cache=...) warm, in process, for the bench corpus kernels
   (bench/corpus: trivial, medium, CUB): ProgramCache and
   kcache.cuda_core.compile against FileStreamProgramCache. cuda.core refuses
   cache= for the CUB kernel (it needs include paths); its baseline there is
   the manual make_program_cache_key pattern with extra_digest = SHA-256 of
   the four headers the kernel names (fewer than it reads: a generous baseline).
3. A whole Python process that compiles warm through kcache.compile (no
   cuda.core import) against `python3 -c pass`, and the same warm compile
   through cuda.core's Program.compile(cache=FileStreamProgramCache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "bench" / "corpus"

work = Path(tempfile.mkdtemp(prefix="kcache-bench-python-"))
os.environ["KCACHE_DIR"] = str(work / "kcache")
os.environ["XDG_CONFIG_HOME"] = str(work / "config")

# The CUDA home whose CCCL the CUB kernel includes (set by same_nvrtc_as_cuda_core()).
CCCL_HOME: Path | None = None


def same_nvrtc_as_cuda_core() -> None:
    """Point kcache at the NVRTC cuda.core loads (NVIDIA's wheel comes first for cuda.core,
    the system toolkit for kcache: docs/python.md), so that both sides compile alike."""
    global CCCL_HOME
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = load_nvidia_dynamic_lib("nvrtc").abs_path
    except Exception:  # no cuda.pathfinder, or no NVRTC it can find: kcache's own choice stands
        return
    if not path or "site-packages" not in path or "KCACHE_CUDA_HOME" in os.environ:
        return
    home = Path(path).resolve().parent.parent
    os.environ["KCACHE_CUDA_HOME"] = str(home)
    if (home / "include" / "cccl").is_dir():
        CCCL_HOME = home  # the CUB kernel's CCCL: that toolkit's own (as a pip user of cuda.core has it)


same_nvrtc_as_cuda_core()

import kcache  # noqa: E402
import kcache.cuda_core as kcc  # noqa: E402
from cuda.core import ObjectCode, Program, ProgramOptions  # noqa: E402
from cuda.core.utils import FileStreamProgramCache, make_program_cache_key  # noqa: E402


def median_us(fn, reps: int, rounds: int) -> float:
    """Median per-call time in µs over `rounds` rounds of `reps` calls."""
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        per.append((time.perf_counter_ns() - t0) / reps / 1e3)
    return statistics.median(per)


def interleaved(fns: dict[str, object], reps: int, rounds: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(median_us(fn, reps, 1))
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_hits(quick: bool) -> list[dict]:
    out = []
    disk_cfg = kcache.Config.load(cache_dir=work / "hits", memory_size=0, put="sync")
    mem_cfg = kcache.Config.load(cache_dir=work / "hits", put="sync")
    disk = kcache.open_store(disk_cfg)
    mem = kcache.open_store(mem_cfg)
    pc = kcc.ProgramCache(disk)
    fs = FileStreamProgramCache(work / "fs")
    for size, reps in ((16 << 10, 200), (256 << 10, 50), (4 << 20, 5)):
        payload = os.urandom(size)
        art = kcache.Artifact.from_bytes(payload, kind="cubin")
        disk.put(art)
        mem.get(art.key)  # fills the memory tier
        ckey = hashlib.sha256(payload).digest()
        pc[ckey] = payload
        fs[ckey] = payload
        raw = work / f"raw-{size}"
        raw.write_bytes(payload)
        key = art.key

        def raw_read(p=raw):
            with open(p, "rb") as f:
                return f.read()

        fns = {
            "open_read": raw_read,
            "kcache_store_disk": lambda: disk.get(key).payload,
            "kcache_store_memory": lambda: mem.get(key).payload,
            "kcache_store_disk_view": lambda: disk.get(key, copy=False).view,
            "kcache_program_cache": lambda: pc.get(ckey),
            "cuda_core_file_stream": lambda: fs.get(ckey),
        }
        for f in fns.values():
            assert bytes(f()) == payload
        t = interleaved(fns, reps if not quick else max(1, reps // 5), 5 if quick else 15)
        row = {"size": size, **{k: round(v, 2) for k, v in t.items()}}
        row["cuda_core_over_kcache_disk"] = round(t["cuda_core_file_stream"] / t["kcache_store_disk"], 2)
        row["cuda_core_over_program_cache"] = round(t["cuda_core_file_stream"] / t["kcache_program_cache"], 2)
        row["kcache_disk_over_floor"] = round(t["kcache_store_disk"] / t["open_read"], 2)
        row["cuda_core_over_kcache_view"] = round(t["cuda_core_file_stream"] / t["kcache_store_disk_view"], 2)
        out.append(row)
    disk.close()
    mem.close()
    return out


def corpus() -> list[tuple[str, str, ProgramOptions, bool]]:
    cuda_home = CCCL_HOME or Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    inc = [str(cuda_home / "include" / "cccl"), str(cuda_home / "include")]
    return [
        ("trivial", (CORPUS / "trivial.cu").read_text(), ProgramOptions(arch="sm_90", name="trivial.cu"), True),
        ("medium", (CORPUS / "medium.cu").read_text(), ProgramOptions(arch="sm_90", name="medium.cu"), True),
        ("cub", (CORPUS / "heavy_cub.cu").read_text(),
         ProgramOptions(arch="sm_90", name="heavy_cub.cu", include_path=inc), False),
    ]


def cub_extra_digest(inc: list[str]) -> bytes:
    h = hashlib.sha256()
    for name in ("cub/block/block_load.cuh", "cub/block/block_reduce.cuh", "cub/block/block_scan.cuh",
                 "cub/block/block_radix_sort.cuh"):
        for d in inc:
            p = Path(d) / name
            if p.is_file():
                h.update(p.read_bytes())
                break
    return h.digest()


def bench_program_compile(quick: bool) -> list[dict]:
    out = []
    store = kcache.open_store(kcache.Config.load(cache_dir=work / "compile", put="sync"))
    pc = kcc.ProgramCache(store)
    fs = FileStreamProgramCache(work / "fs-compile")
    for name, src, opts, cacheable_by_cuda_core in corpus():
        expect = bytes(Program(src, "c++", opts).compile("cubin").code)
        # NVRTC's output for the CUB kernel differs from compile to compile
        # (docs/keys.md): byte equality is checked where it is reproducible.
        reproducible = expect == bytes(Program(src, "c++", opts).compile("cubin").code)
        fns = {"kcache_cuda_core_compile": lambda s=src, o=opts: kcc.compile(s, o, "cubin", store=store)}
        if cacheable_by_cuda_core:
            fns["kcache_program_cache"] = lambda s=src, o=opts: Program(s, "c++", o).compile("cubin", cache=pc)
            fns["cuda_core_file_stream"] = lambda s=src, o=opts: Program(s, "c++", o).compile("cubin", cache=fs)
        else:
            digest = cub_extra_digest(list(opts.include_path))

            def manual(s=src, o=opts, d=digest):
                k = make_program_cache_key(code=s, code_type="c++", options=o, target_type="cubin", extra_digest=d)
                data = fs.get(k)
                if data is None:
                    obj = Program(s, "c++", o).compile("cubin")
                    fs[k] = obj
                    return obj
                return ObjectCode.from_cubin(data, name=o.name)

            fns["cuda_core_file_stream"] = manual
        for f in fns.values():  # cold, then check the warm bytes
            f()
        for f in fns.values():
            warm = bytes(f().code)
            assert warm == expect or not reproducible
            assert bytes(f().code) == warm
        t = interleaved(fns, 5 if quick else 20, 3 if quick else 7)
        row = {"kernel": name, **{k: round(v, 1) for k, v in t.items()}}
        row["file_stream_over_kcache_compile"] = round(t["cuda_core_file_stream"] / t["kcache_cuda_core_compile"], 2)
        if "kcache_program_cache" in t:
            row["file_stream_over_program_cache"] = round(t["cuda_core_file_stream"] / t["kcache_program_cache"], 2)
        out.append(row)
    store.close()
    return out


def bench_process(quick: bool) -> dict:
    src = (CORPUS / "trivial.cu").read_text()
    env = dict(os.environ, KCACHE_DIR=str(work / "process"))
    kc = f"import kcache\na = kcache.compile({src!r}, arch='sm_90', name='trivial.cu')\nassert a.outcome == 'hit'"
    cc = (
        "from cuda.core import Program, ProgramOptions\n"
        "from cuda.core.utils import FileStreamProgramCache\n"
        f"Program({src!r}, 'c++', ProgramOptions(arch='sm_90')).compile('cubin', "
        f"cache=FileStreamProgramCache({str(work / 'process-fs')!r}))"
    )
    # Cold runs first.
    subprocess.run([sys.executable, "-c", kc.replace("\nassert a.outcome == 'hit'", "")], env=env, check=True)
    subprocess.run([sys.executable, "-c", cc], env=env, check=True)
    cmds = {"python_pass": "pass", "kcache_compile_warm": kc, "cuda_core_file_stream_warm": cc}
    samples: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(5 if quick else 15):
        for k, code in cmds.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
            samples[k].append((time.perf_counter() - t0) * 1e3)
    m = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    m["kcache_over_pass"] = round(m["kcache_compile_warm"] / m["python_pass"], 2)
    m["kcache_minus_pass_ms"] = round(m["kcache_compile_warm"] - m["python_pass"], 1)
    m["cuda_core_over_kcache"] = round(m["cuda_core_file_stream_warm"] / m["kcache_compile_warm"], 2)
    return m


def bench_import() -> dict:
    code = ("import time\nc=time.process_time();w=time.perf_counter()\nimport kcache\n"
            "print((time.process_time()-c)*1e3, (time.perf_counter()-w)*1e3)")
    cpu, wall = [], []
    for _ in range(15):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        c, w = map(float, p.stdout.split())
        cpu.append(c)
        wall.append(w)
    return {"import_cpu_ms": round(statistics.median(cpu), 2), "import_wall_ms": round(statistics.median(wall), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    results = {
        "import": bench_import(),
        "hits_us": bench_hits(args.quick),
        "program_compile_warm_us": bench_program_compile(args.quick),
        "process_ms": bench_process(args.quick),
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
