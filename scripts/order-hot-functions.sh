#!/usr/bin/env bash
# Writes src/cli/hot-functions.txt: the functions a `kcache compile` hit (and
# `kcache --version`) runs, in the order callgrind first meets them, which the
# kcache command's link places first and side by side (cmake/kcacheHotText.cmake,
# docs/performance.md "Process start"). Run it after a change that moves the
# hit path (a function renamed, a new one on the path): a stale list costs
# start-up time, never correctness (names it lists that are gone are ignored).
# Usage: scripts/order-hot-functions.sh [KCACHE_BINARY]
#        (default build/release/bin/kcache; needs valgrind and the CUDA toolkit)
set -euo pipefail
cd "$(dirname "$0")/.."
kcache=$(realpath "${1:-build/release/bin/kcache}")
cuda=${KCACHE_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
out=src/cli/hot-functions.txt
command -v valgrind >/dev/null || { echo "order-hot-functions: needs valgrind (Debian: valgrind)" >&2; exit 1; }
[ -x "$kcache" ] || { echo "order-hot-functions: no kcache command at $kcache: build it first" >&2; exit 1; }
[ -d "$cuda/include" ] || { echo "order-hot-functions: no CUDA toolkit at $cuda (set KCACHE_CUDA_HOME)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KCACHE_DIR=$work/cache XDG_CACHE_HOME=$work/xdg
unset KCACHE_REMOTE KCACHE_BUNDLES
mkdir "$work/src" "$work/out"
runs=()
for k in trivial medium heavy_cub; do
  cp "bench/corpus/$k.cu" "$work/src/$k.cu"
  args=(compile "$work/src/$k.cu" --target cubin --arch sm_90 -I "$cuda/include/cccl" -o "$work/out/$k.cubin")
  "$kcache" "${args[@]}" >/dev/null   # the cold compile that fills the cache
  runs+=("${args[*]}")
done
sleep 2.5  # past the racy window of the files just written
i=0
for r in "${runs[@]}" "--version"; do
  # shellcheck disable=SC2086  # the arguments are split on purpose (no spaces in them)
  "$kcache" $r >/dev/null   # the memos of a warm machine
  # shellcheck disable=SC2086
  valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.$i" "$kcache" $r >/dev/null 2>&1
  i=$((i + 1))
done
{
  echo "# The functions a kcache command hit runs, for lld's --symbol-ordering-file"
  echo "# (cmake/kcacheHotText.cmake). Made by scripts/order-hot-functions.sh; do not edit."
  # Callgrind names a function once per file, on its first fn= or cfn= line:
  # "fn=(12) _ZN6kcache7compile..."; a "'2" suffix marks a recursion level,
  # and libc's versioned names ("@@GLIBC_2.2.5"), "(below main)" and the bare
  # addresses of code without symbols ("0x000000000001ab70") are not ours.
  for f in "$work"/cg.*; do
    sed -n 's/^c\{0,1\}fn=([0-9]*) \(.*\)$/\1/p' "$f"
  done | sed "s/'[0-9]*\$//" | grep -E '^[A-Za-z0-9_.$]+$' | grep -v '^0x[0-9a-f]*$' | awk '!seen[$0]++'
} >"$work/list"
mv "$work/list" "$out"
echo "order-hot-functions: $(grep -vc '^#' "$out") functions in $out"
