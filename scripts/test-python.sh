#!/usr/bin/env bash
# The Python part of the README's test command (called by scripts/test.sh):
# builds the portable wheel and installs it into .venv with its test
# dependencies from PyPI (scripts/python-venv.sh test: pytest, mypy,
# cuda-core, cuda-bindings, ...), then runs pytest on python/tests and on the
# packaging tests (tests/packaging: that wheel in a fresh venv, and the
# Debian package made from the ci build when there is one), printing its
# summary line. Fails when pytest fails or collects no test (exit 5).
# Usage: scripts/test-python.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/python-venv.sh test
set +e
KCACHE_WHEEL=$(cat build/wheel-path.txt) .venv/bin/python -m pytest python/tests tests/packaging -q -rs \
  -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
