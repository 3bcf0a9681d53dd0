#!/usr/bin/env bash
# Creates the virtual environment .venv (git-ignored) and installs the kcache
# Python package from this checkout into it, with the optional dependencies
# named in $1 ("test" or "cuda-core", from PyPI). The build back end
# (scikit-build-core, nanobind) is installed into the venv and used without
# build isolation, and builds in build/python/ (git-ignored; a plain
# `pip install .` builds in a temporary directory instead), so that the build is
# reused between runs; only the library and the extension module are built, on
# every core.
# Usage: scripts/python-venv.sh [EXTRAS]     (then use .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${KCACHE_PYTHON:-python3}
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
jobs=$(nproc 2>/dev/null || echo 2)
target="."
[ -n "${1:-}" ] && target=".[$1]"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/python" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --config-settings=build-dir=build/python/{wheel_tag} "$target"
