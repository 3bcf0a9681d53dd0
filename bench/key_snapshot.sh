#!/usr/bin/env bash
# bench/key_snapshot.sh: the keys of a fixed set of requests and every memo
# file kcache writes for them, in a form that `diff -r` compares. Run it on
# two builds (before and after a change that must not change keys or memos,
# such as moving the dependency layer) and compare the two output folders:
#
#   bench/key_snapshot.sh BUILD_DIR OUT_DIR [INPUTS_DIR]
#   diff -r OUT_BEFORE OUT_AFTER          (no output: keys and memos are identical)
#
# BUILD_DIR holds bin/kcache (and, when built, lib/kcache/libkcache-interpose.so
# and bench/run_nvrtc_program: then the interposed NVRTC program runs too;
# KEY_SNAPSHOT_PROGRAM names another run_nvrtc_program, which knows nothing
# of kcache, for a build that lacks it).
# INPUTS_DIR (default ${XDG_CACHE_HOME:-~/.cache}/kcache-key-snapshot) holds the
# requests' sources and CuPy's headers. It must be the same folder, untouched,
# for both runs: header manifests and directory listings record the stat
# identities (device, inode, times) of the files and folders they read, so a
# copy elsewhere would differ. It is made on the first run (CuPy's headers come
# from the cupy-cuda13x wheel, scripts/fetch-cupy-headers.sh) and only read after.
#
# The requests, each compiled twice (a miss, then a hit) by `kcache compile`
# in a fresh cache directory and a fresh per-user memo directory shared by the
# whole run (so that later requests meet the memos of earlier ones, as a user's
# do): every kernel of bench/corpus (PTX, CUBIN and LTO-IR; with -D and name
# expressions), a CCCL kernel over the toolkit's CCCL and over a copy of it
# outside the toolkit (as a CCCL checkout is), two CuPy kernels over
# CuPy's five include folders (the second meets the first one's family), the
# corpus again under KCACHE_BASE_DIR, and the bench corpus through `kcache run`.
#
# OUT_DIR gets:
#   keys.txt      per request and run: hit or miss, the key, the key record
#                 (field = value) and the disk headers' count
#   files.txt     every file and folder under the cache directory and the
#                 per-user memo directory: path, type, mode, size (entries/
#                 by name and mode only: NVRTC's output is not the same bytes
#                 twice, and passports and stats/ hold times)
#   memo/cache/   a copy of $KCACHE_DIR/v1/toolkit and $KCACHE_DIR/v1/headers
#   memo/user/    a copy of the per-user memo directory ($XDG_CACHE_HOME/kcache-toolkit)
# Exit status 0 when every request compiled; the CuPy rows are skipped (and
# said so in keys.txt) when its wheel cannot be fetched.
set -euo pipefail
build=$(cd "${1:?usage: bench/key_snapshot.sh BUILD_DIR OUT_DIR [INPUTS_DIR]}" && pwd)
out=${2:?usage: bench/key_snapshot.sh BUILD_DIR OUT_DIR [INPUTS_DIR]}
inputs=${3:-${XDG_CACHE_HOME:-$HOME/.cache}/kcache-key-snapshot}
root=$(cd "$(dirname "$0")/.." && pwd)
kcache=$build/bin/kcache
cuda=${KCACHE_CUDA_HOME:-/usr/local/cuda}
[ -x "$kcache" ] || { echo "key_snapshot: no $kcache (build the kcache_cli target)" >&2; exit 2; }

# The inputs: made once, never touched again (see above).
made=0
mkdir -p "$inputs/src/corpus"
for f in "$root"/bench/corpus/*.cu; do
  if ! cmp -s "$f" "$inputs/src/corpus/$(basename "$f")"; then
    cp "$f" "$inputs/src/corpus/"
    made=1
  fi
done
# put NAME: stdin becomes $inputs/src/NAME, only where its bytes differ (so
# that an unchanged input keeps its identity).
put() {
  local text
  text=$(cat)
  if [ "$(cat "$inputs/src/$1" 2>/dev/null)" != "$text" ]; then
    printf '%s\n' "$text" >"$inputs/src/$1"
    made=1
  fi
}
put cccl.cu <<'EOF'
#include <cub/block/block_reduce.cuh>
#include <cuda/std/limits>
extern "C" __global__ void cccl_kernel(const int* in, int* out) {
  using Reduce = cub::BlockReduce<int, 128>;
  __shared__ typename Reduce::TempStorage temp;
  const int v = in[blockIdx.x * 128 + threadIdx.x];
  const int sum = Reduce(temp).Sum(v);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = sum == cuda::std::numeric_limits<int>::max() ? 0 : sum;
  }
}
EOF
for n in 1 2; do
  put "cupy_$n.cu" <<EOF
#include <cupy/carray.cuh>
extern "C" __global__ void cupy_kernel_$n(CArray<float, 1> x, CArray<float, 1> y) {
  CUPY_FOR(i, y.size()) { y[i] = x[i] * $n.5f + 1.0f; }
}
EOF
done
cupy=""
if [ -f "$inputs/cupy-headers/cupy/_core/include/cupy/carray.cuh" ]; then
  cupy=$inputs/cupy-headers/cupy/_core/include
elif cupy=$("$root/scripts/fetch-cupy-headers.sh" "$inputs/cupy-headers" 2>/dev/null); then
  made=1
else
  cupy=""
fi
# A copy of the toolkit's CCCL outside the toolkit, as a checkout of CCCL is:
# its headers are scanned and keyed one by one (the toolkit's own are keyed by
# the toolkit's fingerprint).
if [ ! -d "$inputs/cccl-copy" ]; then
  cp -a "$cuda/include/cccl" "$inputs/cccl-copy.tmp"
  mv "$inputs/cccl-copy.tmp" "$inputs/cccl-copy"
  made=1
fi
# Identities younger than two seconds are never remembered: let new inputs age.
if [ "$made" = 1 ]; then
  sleep 2.5
fi

state=$inputs.run  # beside the inputs: making it must not touch their folder
rm -rf "$state" "$out"
mkdir -p "$state/cache" "$state/xdg" "$state/home" "$state/out" "$out"
export KCACHE_DIR=$state/cache XDG_CACHE_HOME=$state/xdg HOME=$state/home
export -n KCACHE_DISABLE KCACHE_REMOTE KCACHE_BASE_DIR KCACHE_CONFIG 2>/dev/null || true
unset KCACHE_DISABLE KCACHE_REMOTE KCACHE_BASE_DIR KCACHE_CONFIG XDG_CONFIG_HOME
keys=$out/keys.txt
: >"$keys"

# request NAME FILE ARGS...: compiles FILE twice from $inputs/src (the working
# directory: a scan also looks at its parent, $inputs, which nothing changes
# after setup) and notes both results.
request() {
  local name=$1 file=$2
  shift 2
  local n
  for n in miss hit; do
    local json
    if ! json=$(cd "$inputs/src" && "$kcache" compile "$file" --json -o "$state/out/$name.out" "$@"); then
      echo "key_snapshot: $name ($n run) failed" >&2
      exit 1
    fi
    printf '%s\n' "$json" | python3 -c '
import json, sys
name, run = sys.argv[1], sys.argv[2]
j = json.load(sys.stdin)
p = j["passport"]
kr = p["key_record"]
print("== %s (%s run): %s" % (name, run, "hit" if j.get("hit") else "miss"))
print("key", p["key"])
print("domain", kr["domain"])
for f in kr["fields"]:
    print("  %s = %s%s" % (f["name"], "sha256:" if f.get("digest") else "", f["value"]))
print("disk headers", len(j.get("disk_headers", [])))
' "$name" "$n" >>"$keys"
  done
}

request trivial_ptx corpus/trivial.cu --target ptx --arch sm_90
request trivial_cubin corpus/trivial.cu --target cubin --arch sm_90
request trivial_ltoir corpus/trivial.cu --target ltoir --arch sm_90
request trivial_define corpus/trivial.cu --target ptx --arch sm_90 -D KCACHE_SNAPSHOT=1
request medium_cubin corpus/medium.cu --target cubin --arch sm_90 \
  -e 'matmul<float, 16>' -e 'matmul<double, 8>'
request heavy_cub corpus/heavy_cub.cu --target ptx --arch sm_90 -I "$cuda/include/cccl"
request cccl cccl.cu --target ptx --arch sm_90 -I "$cuda/include/cccl"
request cccl_copy cccl.cu --target ptx --arch sm_90 -I "$inputs/cccl-copy"
request heavy_cub_copy corpus/heavy_cub.cu --target cubin --arch sm_90 -I "$inputs/cccl-copy"
request cccl_lineinfo cccl.cu --target ptx --arch sm_90 -I "$cuda/include/cccl" --option=-lineinfo
if [ -n "$cupy" ]; then
  cupy_includes=(-I "$cupy" -I "$cupy/cupy/_cccl/cub" -I "$cupy/cupy/_cccl/thrust"
    -I "$cupy/cupy/_cccl/libcudacxx" -I "$cuda/include")
  request cupy_1 cupy_1.cu --target ptx --arch sm_90 --option=--std=c++17 "${cupy_includes[@]}"
  request cupy_2 cupy_2.cu --target ptx --arch sm_90 --option=--std=c++17 "${cupy_includes[@]}"
else
  echo "== cupy: skipped (scripts/fetch-cupy-headers.sh could not fetch the cupy-cuda13x wheel)" >>"$keys"
fi
KCACHE_BASE_DIR=$inputs request base_dir_trivial "$inputs/src/corpus/trivial.cu" --target ptx --arch sm_90 \
  -I "$inputs/src/corpus"
KCACHE_BASE_DIR=$inputs request base_dir_cub "$inputs/src/corpus/heavy_cub.cu" --target ptx --arch sm_90 \
  -I "$cuda/include/cccl" -I "$inputs/src/corpus"

# The interposer: an ordinary NVRTC program under `kcache run` (its keys are
# the entries it leaves; files.txt lists them).
program=${KEY_SNAPSHOT_PROGRAM:-$build/bench/run_nvrtc_program}
if [ -x "$program" ] && [ -f "$build/lib/kcache/libkcache-interpose.so" ]; then
  for n in miss hit; do
    (cd "$inputs/src" && "$kcache" run -- "$program" "$inputs/src/corpus" "$cuda" >/dev/null)
  done
  echo "== kcache run: run_nvrtc_program over corpus/ (twice)" >>"$keys"
else
  echo "== kcache run: skipped (build run_nvrtc_program and the interposer)" >>"$keys"
fi

# What was written. Passports and stats/ hold times, and NVRTC's output is not
# always the same bytes twice (its internal names hold a number of its own, so
# CUB's PTX differs in bytes and size run to run): entries are listed by name.
user=$XDG_CACHE_HOME/kcache-toolkit
{
  (cd "$KCACHE_DIR" && find . -mindepth 1 -printf 'cache/%P %y %m %s\n' | grep -v -e '^cache/v1/stats/' -e '^cache/v1/tmp/' \
    -e '\.pass [a-z] [0-7]* [0-9]*$' -e '^cache/v1/locks/' -e '^cache/v1/stats ' -e '^cache/v1/locks ')
  if [ -d "$user" ]; then (cd "$user" && find . -mindepth 1 -printf 'user/%P %y %m %s\n'); fi
} | awk '$1 ~ /^cache\/v1\/entries\/../ && $2 == "f" { $4 = "-" } { print }' | LC_ALL=C sort >"$out/files.txt"
mkdir -p "$out/memo/cache" "$out/memo/user"
for d in toolkit headers; do
  if [ -d "$KCACHE_DIR/v1/$d" ]; then cp -a "$KCACHE_DIR/v1/$d" "$out/memo/cache/"; fi
done
if [ -d "$user" ]; then cp -a "$user/." "$out/memo/user/"; fi
echo "key_snapshot: $(grep -c '^key ' "$keys") keys, $(wc -l <"$out/files.txt") files -> $out" >&2
