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

# Wanted where the distribution has it: lld 15+ links the kcache command with
# its hot path side by side (cmake/kcacheHotText.cmake); without it the
# command links with ld, correct and ~10 % slower to start.
optional=(lld-16)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${packages[@]}"; do
  if ! installed "$p"; then
    missing+=("$p")
  fi
done
missing_optional=()
for p in "${optional[@]}"; do
  if ! installed "$p"; then
    missing_optional+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi
without_optional() {
  echo "bootstrap: all ${#packages[@]} packages present (not ${missing_optional[*]}: the kcache command links" \
       "without its hot-text order)"
  exit 0
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    [ ${#missing[@]} -ne 0 ] || without_optional
    echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
  # Only what is optional is missing: no package list update for it where
  # the lists do not know it (another distribution), so a second run is quick.
  apt-cache show "${missing_optional[@]}" >/dev/null 2>&1 || without_optional
fi
$SUDO apt-get update -qq
for p in "${missing_optional[@]}"; do
  if apt-cache show "$p" >/dev/null 2>&1; then
    missing+=("$p")
  else
    echo "bootstrap: $p is not in this distribution's packages: the kcache command links without its hot-text order"
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "bootstrap: installing ${missing[*]}"
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
