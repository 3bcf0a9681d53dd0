#!/usr/bin/env bash
# Time added to a build by a remote that accepts connections and never
# answers (issue 18 item 2): N small kernels built as N `kcache compile`
# processes, one after the other (as make -j1 runs them), without a remote
# (the baseline, in the same run) and with a hung one. Before the shared
# breaker every process waited out ~4 timeouts (get, second get, lease SET,
# exit flush); now the first process pays one and the others skip the remote.
# The hung server is a small Python listener that accepts and reads, never writes.
# Usage: scripts/bench-hung-remote.sh [files=20] [timeout_ms=2000] [kcache=build/ci/bin/kcache]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
timeout_ms=${2:-2000}
kcache=$(realpath "${3:-build/ci/bin/kcache}")
work=$(mktemp -d)
server_pid=
trap 'if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
port_file=$work/port
python3 - "$port_file" <<'PY' &
import selectors, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(512)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is s:
            c, _ = s.accept(); sel.register(c, selectors.EVENT_READ)
        elif not key.fileobj.recv(65536):
            sel.unregister(key.fileobj); key.fileobj.close()
PY
server_pid=$!
for _ in $(seq 100); do [ -s "$port_file" ] && break; sleep 0.05; done
port=$(cat "$port_file")
cd "$work"
for i in $(seq 0 $((n - 1))); do
  echo "extern \"C\" __global__ void k$i(float* p) { p[threadIdx.x] *= $((i + 2)).0f; }" >"k$i.cu"
done
build() {  # cache dir, then env assignments: prints the build's milliseconds
  local cache=$1
  shift
  local t0
  t0=$(date +%s%N)
  for i in $(seq 0 $((n - 1))); do
    env KCACHE_DIR="$work/$cache" "$@" "$kcache" compile "k$i.cu" --target ptx --arch sm_90 -o "k$i.$cache.ptx" \
      2>>"$work/$cache.err"
  done
  echo $((($(date +%s%N) - t0) / 1000000))
}
base=$(build base)
hung=$(build hung KCACHE_REMOTE="redis://127.0.0.1:$port?timeout_ms=$timeout_ms")
echo "files=$n timeout_ms=$timeout_ms"
echo "no remote:    $base ms"
echo "hung remote:  $hung ms"
echo "added:        $((hung - base)) ms for the build ($(((hung - base) / n)) ms per process)"
echo "warnings:     $(grep -c warning "$work/hung.err" || true) lines"
"$kcache" --cache-dir "$work/hung" stats | grep -A2 "remote redis" || true
