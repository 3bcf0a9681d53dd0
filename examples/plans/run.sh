#!/usr/bin/env bash
# Builds the example plan twice: cold (everything BUILT), then warm
# (everything REUSED), and checks the sidecars with sha256sum.
# Usage: examples/plans/run.sh [path/to/kcache]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kcache="${1:-${KCACHE:-$here/../../build/release/bin/kcache}}"
[ -x "$kcache" ] || kcache="$(command -v kcache)"
plan="$here/kernels.toml"
host=()
# Without a GPU the SM cannot be probed: build for Jetson Orin (SM 8.7) as an example host.
if "$kcache" plan show "$plan" | grep -q '^host: *sm=na'; then
  host=(--host "sm=87,jp=6.2,trt=10.3")
  echo "no GPU found: building for ${host[1]}"
fi
"$kcache" plan check "$plan"
rm -rf "$here/build"
echo "== cold build"
"$kcache" plan build "$plan" "${host[@]}" -j 2 --log-json "$here/build-events.jsonl"
echo "== warm build"
"$kcache" plan build "$plan" "${host[@]}" -j 2
echo "== sidecars"
(cd "$here/build" && sha256sum -c ./*.sha256)
echo "== events of the cold build"
cat "$here/build-events.jsonl"
rm -f "$here/build-events.jsonl"
