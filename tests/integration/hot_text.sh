#!/bin/sh
# The kcache command's hot path lies side by side (cmake/kcacheHotText.cmake):
# the first 400 functions of src/cli/hot-functions.txt that the command
# defines lie within 2 MiB of its text (linked without the order they spread
# over most of its 6 MB), and the command was linked by lld.
# Usage: hot_text.sh KCACHE_BINARY HOT_FUNCTIONS_TXT
set -eu
bin=$1
list=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! readelf -p .comment "$bin" | grep -q "LLD"; then
  echo "hot_text: $bin was not linked by lld" >&2
  exit 1
fi
grep -v '^#' "$list" | head -n 400 >"$tmp/want"
nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ {print $3, $1}' >"$tmp/symbols"
awk 'NR == FNR {want[$1] = 1; next} ($1 in want) {print $2}' "$tmp/want" "$tmp/symbols" >"$tmp/found"
count=$(wc -l <"$tmp/found")
if [ "$count" -lt 200 ]; then
  echo "hot_text: only $count of the listed functions are in $bin: run scripts/order-hot-functions.sh" >&2
  exit 1
fi
min=$(sort "$tmp/found" | head -n 1)
max=$(sort "$tmp/found" | tail -n 1)
span=$(($(printf '%d' "0x$max") - $(printf '%d' "0x$min")))
echo "hot_text: $count hot functions span $span bytes"
if [ "$span" -gt $((2 * 1024 * 1024)) ]; then
  echo "hot_text: they span more than 2 MiB: the order was not applied" >&2
  exit 1
fi
