#!/usr/bin/env bash
# The Python part of the README's test command (called by scripts/test.sh):
# builds and installs the kcache package into .venv with its test
# dependencies from PyPI (scripts/python-venv.sh test: pytest, mypy,
# cuda-core, cuda-bindings) and runs pytest on python/tests, printing its
# summary line. Fails when pytest fails or collects no test (exit 5).
# Usage: scripts/test-python.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/python-venv.sh test
set +e
.venv/bin/python -m pytest python/tests -q -rs -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test-python: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
