#!/usr/bin/env bash
# Inside a mount namespace whose /usr, /etc and /var are overlays (so that
# nothing on the machine changes, whatever happens): installs the package,
# uses it as a user and a C++ project would, removes it and checks that
# nothing of it is left. Run by tests/packaging/test_deb.py.
# Usage: deb_check.sh DEB UPPER_DIR WORK_DIR CONSUMER_SRC SCRATCH
set -euo pipefail
deb=$1 upper=$2 work=$3 consumer=$4 scratch=$5
for d in usr etc var; do
  mkdir -p "$upper/$d" "$work/$d"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$upper/$d,workdir=$work/$d" "/$d"
done
export DEBIAN_FRONTEND=noninteractive
dpkg -i "$deb"
dpkg -s kcache | grep -q '^Status: install ok installed'
echo "version $(/usr/bin/kcache --version)"
# The stand-in and the ONNX module are found beside the command in /usr/lib/kcache/.
/usr/bin/kcache run --print-env | grep -F "LD_PRELOAD='/usr/lib/kcache/libkcache-interpose.so'"
printf 'not a protobuf message' >"$scratch/bad.onnx"
set +e
KCACHE_DIR="$scratch/cache" /usr/bin/kcache inspect "$scratch/bad.onnx" >"$scratch/inspect.txt" 2>&1
rc=$?
set -e
grep -q "is not an ONNX model" "$scratch/inspect.txt" || { cat "$scratch/inspect.txt"; echo "ONNX module not found (exit $rc)"; exit 1; }
# A CMake project finds the package on the default search path, and pkg-config finds kcache.pc.
cmake -S "$consumer" -B "$scratch/consumer-build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$scratch/cmake.log" 2>&1 ||
  { cat "$scratch/cmake.log"; exit 1; }
cmake --build "$scratch/consumer-build" >>"$scratch/cmake.log" 2>&1 || { cat "$scratch/cmake.log"; exit 1; }
"$scratch/consumer-build/consumer"
grep -h "kcache_DIR:" "$scratch/consumer-build/CMakeCache.txt"
echo "pkg-config $(pkg-config --modversion kcache)"
dpkg -L kcache >"$scratch/files.txt"
dpkg -r kcache
if dpkg -s kcache 2>/dev/null | grep -q '^Status: install ok installed'; then
  echo "kcache is still installed after dpkg -r"; exit 1
fi
left=0
while read -r f; do
  if [ -f "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; left=1; fi
done <"$scratch/files.txt"
# Nothing new under /usr at all: the overlay's upper layer holds no file.
find "$upper/usr" -type f -o -type l | sed 's/^/left in \/usr: /' | grep . && left=1
[ "$left" -eq 0 ]
echo "removed cleanly"
