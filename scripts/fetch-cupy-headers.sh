#!/usr/bin/env bash
# Fetches CuPy's headers (and the CCCL it bundles) from the cupy-cuda13x wheel
# on PyPI, for the miss-cost benchmark (bench/bench_miss.cpp). No GPU is needed:
# only the headers are unpacked.
#
#   scripts/fetch-cupy-headers.sh [DIR]      (default .cache/cupy-headers)
#   KCACHE_BENCH_CUPY=$(scripts/fetch-cupy-headers.sh) build/ci/bench/bench_miss
#
# Prints the include directory (the one holding cupy/carray.cuh). The wheel
# (~70 MB) is kept in DIR/wheel, so a second run downloads nothing.
set -euo pipefail
dir=${1:-.cache/cupy-headers}
mkdir -p "$dir/wheel"
if ! ls "$dir"/wheel/cupy_cuda13x-*.whl >/dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: cupy-cuda13x -d "$dir/wheel" >&2
fi
if [ ! -f "$dir/cupy/_core/include/cupy/carray.cuh" ]; then
  python3 - "$dir" <<'PY'
import glob, sys, zipfile
d = sys.argv[1]
wheel = sorted(glob.glob(d + "/wheel/cupy_cuda13x-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    z.extractall(d, members=[n for n in z.namelist() if n.startswith("cupy/_core/include/")])
PY
fi
cd "$dir/cupy/_core/include" && pwd
