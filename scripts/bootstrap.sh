#!/usr/bin/env bash
# Installs everything kcache needs to build and test, from Debian packages only.
# Safe to run again; does nothing when every package is already present.
# Usage: scripts/bootstrap.sh            (needs root, or sudo)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libssl-dev openssl ca-certificates libxxhash-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev
  libfmt-dev libexpected-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  redis-server redis-tools
  libcurl4-openssl-dev nginx-light
  binutils util-linux procps
  python3 python3-venv python3-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
