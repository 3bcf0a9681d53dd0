#!/usr/bin/env bash
# The README's main command: installs dependencies, builds the release preset,
# and runs the examples end to end on the default on-disk cache (KCACHE_DIR
# if set, else $XDG_CACHE_HOME/kcache, else ~/.cache/kcache), saying what
# happens at each step. Safe to run again: the second run finds its entries.
# Usage: scripts/run-examples.sh
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

say "bootstrap: Debian packages"
scripts/bootstrap.sh

say "build: release preset (library, kcache command, examples)"
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release -DKCACHE_BUILD_TESTS=OFF -DKCACHE_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$jobs" --target kcache_cli store_fetch
kcache=build/release/bin/kcache
store_fetch=build/release/examples/store_fetch

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say "where the cache lives, and where each setting came from"
run "$kcache" config

say "put: store a PTX file; the key is SHA-256 over its kind and content (never its name)"
printf '$ %s\n' "$kcache put examples/data/vector_add.ptx --kind ptx --label example=run-examples"
key=$("$kcache" put examples/data/vector_add.ptx --kind ptx --label example=run-examples)
echo "$key"
cp examples/data/vector_add.ptx "$work/renamed.ptx"
key2=$("$kcache" put "$work/renamed.ptx" --kind ptx)
echo "the same bytes under another name give the same key: $([ "$key" = "$key2" ] && echo yes || echo NO)"
[ "$key" = "$key2" ]

say "get: fetch it back (verified against its passport) and compare byte for byte"
run "$kcache" get "$key" -o "$work/fetched.ptx"
cmp examples/data/vector_add.ptx "$work/fetched.ptx"
echo "identical: $(wc -c <"$work/fetched.ptx") bytes"

say "show: the passport of the entry"
run "$kcache" show "$key"

say "a miss is exit code 3, never an error"
set +e
"$kcache" get 0000000000000000000000000000000000000000000000000000000000000000 >/dev/null
rc=$?
set -e
echo "exit code: $rc"
[ "$rc" -eq 3 ]

say "C++ API: examples/store_fetch.cpp puts an artifact and fetches it from memory, then from disk"
run "$store_fetch"

ms() { echo $(( $(date +%s%N) / 1000000 )); }
say "compile: CUDA C++ with NVRTC through the cache, then the same compile again in a new process"
src=examples/plans/kernels/saxpy.cu
set +e
t0=$(ms); "$kcache" compile "$src" --target cubin --arch sm_90 -o "$work/saxpy.cubin" --explain; rc=$?; t1=$(ms)
set -e
if [ "$rc" -eq 6 ]; then
  echo "no CUDA toolkit found (set KCACHE_CUDA_HOME): skipping the compile and plan examples"
else
  [ "$rc" -eq 0 ]
  echo "first process: $((t1 - t0)) ms"
  t0=$(ms); run "$kcache" compile "$src" --target cubin --arch sm_90 -o "$work/saxpy2.cubin" --explain; t1=$(ms)
  echo "second process: $((t1 - t0)) ms (a hit: NVRTC is not even loaded)"
  cmp "$work/saxpy.cubin" "$work/saxpy2.cubin"
  echo "the cubin is a CUDA ELF file; its kernels:"
  readelf -sW "$work/saxpy.cubin" | awk '/ FUNC / {print "  " $NF}'

  say "plan: build the example kernel set for this hardware, cold (BUILT) then warm (REUSED)"
  run examples/plans/run.sh "$kcache"

  say "Python: pip install the kcache package (.venv), then a cuda.core compile through kcache, twice"
  scripts/python-venv.sh cuda-core
  echo "-- first process"
  run .venv/bin/python examples/python/cuda_core_jit.py
  echo "-- second process (warm: verified hits from the on-disk cache)"
  run .venv/bin/python examples/python/cuda_core_jit.py
fi

say "ls: what the cache holds"
run "$kcache" ls

say "stats: counters shared by every process using this cache"
run "$kcache" stats

say "verify: re-hash every entry in full"
run "$kcache" verify

say "done: every example ran and every byte came back exactly"
