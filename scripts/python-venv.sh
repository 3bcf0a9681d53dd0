#!/usr/bin/env bash
# Creates the virtual environment .venv (git-ignored) and installs kcache into
# it as users get it: the portable wheel that scripts/build-wheel.sh builds
# from this checkout (the Python package, the native kcache command in
# .venv/bin, the stand-in of `kcache run`, the ONNX module), with the optional
# dependencies named in $1 ("test" or "cuda-core", from PyPI). The build back
# end is installed into the venv and used without build isolation, in
# build/python/ (git-ignored; a plain `pip install .` builds in a temporary
# directory instead), so that the build is reused between runs; only what the
# wheel carries is built, on every core.
# Usage: scripts/python-venv.sh [EXTRAS]     (then use .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
wheel=$(KCACHE_VENV=$venv scripts/build-wheel.sh | tail -n 1)
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# The same version as an installed one, rebuilt: replaced, not "already satisfied".
"${pip[@]}" --force-reinstall --no-deps "$wheel"
if [ -n "${1:-}" ]; then
  "${pip[@]}" "$wheel[$1]"
fi
