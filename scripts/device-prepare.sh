#!/usr/bin/env bash
# Prepares .dev/ (git-ignored through .git/info/exclude): everything
# scripts/device-check.sh needs on a lent GPU machine that has the NVIDIA
# driver, a CUDA toolkit, Python 3.12 with Triton / torch / CuPy, but none of
# kcache's build dependencies and no network. Binaries built here are copied
# stripped (the machine takes at most 64 MiB of tree), with the few shared
# libraries it may lack; the Python package travels as a cp312 wheel, with the
# cuda-core / cuda-bindings wheels the tests are run against here.
#
#   cmake --build --preset ci && cmake --build --preset release
#   scripts/device-prepare.sh [PYTHON312]     (default: pyenv's 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
py312=${1:-$(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null | tail -1)}
dev=.dev
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >>.git/info/exclude
rm -rf "$dev"
mkdir -p "$dev/bin" "$dev/lib/kcache" "$dev/lib-redis" "$dev/whl"

copy_bin() {  # copy_bin SRC NAME: a stripped copy in .dev/bin
  strip -o "$dev/bin/$2" "$1"
}
copy_bin build/ci/tests/gpu/test_gpu test_gpu
copy_bin build/ci/tests/unit/load/test_load test_load
for b in bench_pool bench_remote_lease bench_miss; do
  copy_bin "build/ci/bench/$b" "$b"
done
copy_bin build/release/bin/kcache kcache
# The benchmarks start the kcache command by its path in this build tree
# (KCACHE_CLI_PATH): device-check.sh makes that path lead to the copy.
realpath build/ci/bin/kcache >"$dev/ci-cli-path"
strip -o "$dev/lib/kcache/libkcache-interpose.so" build/release/lib/kcache/libkcache-interpose.so

# Libraries a CUDA image is unlikely to have (Google Benchmark, hiredis for ccache).
for l in libbenchmark.so.1debian libhiredis.so.0.14; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$dev/lib/"
done
# redis-server and every library it links but libc's own: used only with
# LD_LIBRARY_PATH=.dev/lib-redis, for the cross-host herd.
cp -L "$(command -v redis-server)" "$dev/bin/redis-server"
ldd "$(command -v redis-server)" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|ld-linux[^/]*)\.so' |
  while read -r l; do cp -L "$l" "$dev/lib-redis/"; done
cp -L "$(command -v ccache)" "$dev/bin/ccache"

# The Python package for CPython 3.12 (the device's interpreter) and the
# cuda-core it is tested with.
PATH="$(dirname "$py312"):$PATH"
venv=build/device-py312
[ -x "$venv/bin/python" ] || "$py312" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0"
"$venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation \
  --config-settings=build-dir=build/python/{wheel_tag} -w "$dev/whl" .
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$dev/whl" \
  cuda-core==1.2.2 cuda-bindings==13.5.0 cuda-pathfinder==1.9.1
du -sh "$dev"
