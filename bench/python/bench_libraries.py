"""Per library: what kcache saves an unmodified program on its second run (docs/run.md, "What has been tried").

    cmake --build --preset ci --target kcache_cli kcache_interpose run_nvrtc_program
    scripts/python-venv.sh test
    .venv/bin/python bench/python/bench_libraries.py [--runs N] [--only NAME,...] [--json out.json]

Each library's program is an ordinary user of it that knows nothing of kcache, compiling for
sm_90 without a GPU, and measures the time its compile calls take (wall clock, inside the
program):

  nvrtc-app  bench/run_nvrtc_program: a C++ program that dlopens NVRTC (trivial, templated,
             CUB kernels of bench/corpus)
  cuda-core  cuda.core's Program(...).compile("cubin") of the same kernels (no cache=)
  numba      numba.cuda.compile_ptx of three functions; also the time inside libNVVM
             (CompilationUnit.compile), to say what part of a Numba compile kcache can save
  cupy       cupy.cuda.compiler.compile_using_nvrtc of an elementwise kernel over
             <cupy/carray.cuh> and a plain RawKernel source, as CuPy compiles on a miss of its
             own kernel cache (its device query replaced: no GPU)
  jitify     jitify2's loop through NVRTC with ctypes: a preprocessing compile that ends on
             #include <__JITIFY_STOP_COMPILATION> (it fails on purpose), then the real compile,
             of a CUB kernel
  triton     triton.compile of two kernels for GPUTarget("cuda", 90, 32) (ptxas from the
             wheel), with a fresh TRITON_CACHE_DIR in every run: Triton's own cache never hits

Modes, each in new processes, interleaved: "before" (no kcache), then under `kcache run` a cold
run into an empty cache directory and --runs warm runs (the second run and later). "compiles"
of a run is what compiled for real in it: the requests `kcache stats` counts as compiled,
uncached or failed in it (route run: the stand-in; route triton: kcache.triton, which `kcache
run` turns on). Times are medians. Prints one JSON object; the machine's load average is in it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CUDA = Path(os.environ.get("KCACHE_CUDA_HOME") or os.environ.get("CUDA_HOME") or "/usr/local/cuda")
CORPUS = ROOT / "bench" / "corpus"

# Each Python program prints one JSON line: {"compile_us": total, ...extra}.
_TIMER = "import json, time\nt = 0\ndef timed(f, *a, **k):\n    global t\n    s = time.perf_counter()\n    r = f(*a, **k)\n    t += time.perf_counter() - s\n    return r\n"

CUDA_CORE = _TIMER + f"""
from cuda.core import Program, ProgramOptions
corpus = {str(CORPUS)!r}
for name, inc in (("trivial.cu", ()), ("medium.cu", ()), ("heavy_cub.cu", ({str(CUDA / "include" / "cccl")!r},))):
    src = open(corpus + "/" + name).read()
    opts = ProgramOptions(arch="sm_90", std="c++17", include_path=list(inc) or None)
    timed(lambda: Program(src, "c++", opts).compile("cubin"))
print(json.dumps({{"compile_us": int(t * 1e6)}}))
"""

NUMBA = _TIMER + """
import warnings
warnings.simplefilter("ignore")
from numba import cuda, float32, int32
from numba.cuda.cudadrv import nvvm
nvvm_s = 0.0
inner = nvvm.CompilationUnit.compile
def counted(self):
    global nvvm_s
    s = time.perf_counter()
    r = inner(self)
    nvvm_s += time.perf_counter() - s
    return r
nvvm.CompilationUnit.compile = counted

def axpy(r, a, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = a * x[i] + y[i]

def scan(x, out):
    s = cuda.shared.array(256, float32)
    i = cuda.threadIdx.x
    s[i] = x[i]
    cuda.syncthreads()
    k = 1
    while k < 256:
        v = s[i - k] if i >= k else 0.0
        cuda.syncthreads()
        s[i] += v
        cuda.syncthreads()
        k *= 2
    out[i] = s[i]

def hist(data, bins):
    i = cuda.grid(1)
    if i < data.size:
        cuda.atomic.add(bins, data[i] % bins.size, 1)

for fn, sig in ((axpy, (float32[:], float32, float32[:], float32[:])), (scan, (float32[:], float32[:])),
                (hist, (int32[:], int32[:]))):
    timed(cuda.compile_ptx, fn, sig, cc=(9, 0))
print(json.dumps({"compile_us": int(t * 1e6), "nvvm_us": int(nvvm_s * 1e6)}))
"""

CUPY = _TIMER + f"""
import os
import cupy
from cupy.cuda import compiler
compiler._get_arch_for_options_for_nvrtc = lambda arch=None: ("-arch=sm_90", "cubin")
include = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
elementwise = (
    "#include <cupy/complex.cuh>\\n#include <cupy/carray.cuh>\\n#include <cupy/atomics.cuh>\\n"
    "typedef float T;\\n"
    'extern "C" __global__ void cupy_scale(const CArray<T, 1, true, true> x, CArray<T, 1, true, true> y, '
    "CIndexer<1> _ind) {{ CUPY_FOR(i, _ind.size()) {{ _ind.set(i); y[_ind.get()] = x[_ind.get()] * (T)3; }} }}\\n"
)
raw = 'extern "C" __global__ void k(float* p) {{ p[threadIdx.x] *= 3; }}\\n'
options = ("-I" + include, "-I" + {str(CUDA / "include" / "cccl")!r}, "--std=c++17")  # CCCL, as CuPy adds it
for src in (elementwise, raw):
    timed(compiler.compile_using_nvrtc, src, options=options, arch="90")
print(json.dumps({{"compile_us": int(t * 1e6)}}))
"""

JITIFY = _TIMER + f"""
import ctypes
nvrtc = ctypes.CDLL("libnvrtc.so.13")
cccl = {str(CUDA / "include" / "cccl")!r}
src = open({str(CORPUS / "heavy_cub.cu")!r}).read()
def compile(text, name):
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), name.encode(), 0, None, None) == 0
    opts = (ctypes.c_char_p * 3)(b"-arch=sm_90", b"-std=c++17", ("-I" + cccl).encode())
    rc = nvrtc.nvrtcCompileProgram(prog, 3, opts)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc
# jitify2: the preprocessing compile stops itself on a header that never exists; then the real one.
assert timed(compile, src + "\\n#include <__JITIFY_STOP_COMPILATION>\\n", "heavy_cub.cu") != 0
assert timed(compile, src, "heavy_cub.cu") == 0
print(json.dumps({{"compile_us": int(t * 1e6)}}))
"""

TRITON = _TIMER + """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

@triton.jit
def softmax(x, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + tl.program_id(0) * n + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(v - tl.max(v, 0))
    tl.store(out + tl.program_id(0) * n + offs, e / tl.sum(e, 0), mask=offs < n)

target = GPUTarget("cuda", 90, 32)
timed(triton.compile, ASTSource(add, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                constexprs={"BLOCK": 1024}), target=target)
timed(triton.compile, ASTSource(softmax, {"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                constexprs={"BLOCK": 1024}), target=target)
print(json.dumps({"compile_us": int(t * 1e6)}))
"""


def programs(build: Path, work: Path) -> dict[str, list[str]]:
    py = [sys.executable, "-c"]
    triton = work / "triton_program.py"  # Triton's @jit needs its functions in a file
    triton.write_text(TRITON)
    return {
        "nvrtc-app": [str(build / "bench" / "run_nvrtc_program"), str(CORPUS), str(CUDA)],
        "cuda-core": py + [CUDA_CORE],
        "numba": py + [NUMBA],
        "cupy": py + [CUPY],
        "jitify": py + [JITIFY],
        "triton": [sys.executable, str(triton)],
    }


def compile_us(out: str) -> dict[str, int]:
    j = json.loads(out.strip().splitlines()[-1])
    if "compile_us" not in j:  # run_nvrtc_program: one figure per kernel
        return {"compile_us": sum(v for k, v in j.items() if not k.endswith("/cpu"))}
    return j


def real_compiles(kcache: str, env: dict[str, str]) -> int:
    out = subprocess.run([kcache, "stats", "--json"], env=env, capture_output=True, text=True, check=True).stdout
    r = json.loads(out)["requests"]
    return r["compiled"] + r["uncached"] + r["failed"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build" / "ci"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    build = Path(args.build)
    kcache = str(build / "bin" / "kcache")
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-libraries-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("KCACHE_")}
    base.setdefault("CUDA_HOME", str(CUDA))
    result: dict = {"runs": args.runs, "loadavg_start": os.getloadavg(), "libraries": {}}
    only = set(filter(None, args.only.split(",")))
    try:
        for name, argv in programs(build, work).items():
            if only and name not in only:
                continue
            cache = work / name / "cache"
            n = 0

            def env() -> dict[str, str]:
                nonlocal n
                n += 1  # a fresh Triton cache every run: Triton's own cache never hits
                return dict(base, KCACHE_DIR=str(cache), TRITON_CACHE_DIR=str(work / name / f"triton-{n}"))

            def run(prefix: list[str]) -> dict[str, int]:
                done = subprocess.run(prefix + argv, env=env(), capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
                return compile_us(done.stdout)

            row: dict = {}
            try:
                before = [run([]) for _ in range(args.runs)]
                start = time.time()
                cold = run([kcache, "run", "--no-summary", "--"])
                row["cold_wall_s"] = round(time.time() - start, 2)
                compiles_cold = real_compiles(kcache, env())
                warm = []
                compiles_second = None
                for i in range(args.runs):
                    warm.append(run([kcache, "run", "--no-summary", "--"]))
                    if i == 0:
                        compiles_second = real_compiles(kcache, env()) - compiles_cold
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                result["libraries"][name] = {"error": str(e)[-500:]}
                continue
            med = lambda runs, k="compile_us": statistics.median(r[k] for r in runs)  # noqa: E731
            row.update({
                "compiles_first_run": compiles_cold,
                "compiles_second_run": compiles_second,
                "before_s": round(med(before) / 1e6, 3),
                "cold_s": round(cold["compile_us"] / 1e6, 3),
                "after_s": round(med(warm) / 1e6, 3),
                "speedup": round(med(before) / max(med(warm), 1), 1),
            })
            if "nvvm_us" in before[0]:
                row["nvvm_s_before"] = round(med(before, "nvvm_us") / 1e6, 3)
                row["nvvm_share_of_compile"] = round(med(before, "nvvm_us") / max(med(before), 1), 3)
                row["nvvm_s_after"] = round(med(warm, "nvvm_us") / 1e6, 4)
            result["libraries"][name] = row
            print(name, json.dumps(row), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["loadavg_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
