#!/usr/bin/env bash
# Makes the Debian package kcache_<version>_<arch>.deb (docs/install.md) with
# CPack from a build tree of this project that is already built (default
# build/ci, the tree scripts/test.sh builds; a release package is made from
# `cmake --preset release && cmake --build --preset release`). The package
# holds what `cmake --install` installs, under /usr, stripped; its Depends are
# computed by dpkg-shlibdeps plus the -dev packages a C++ consumer links
# (cmake/kcachePackaging.cmake). It goes to $KCACHE_DIST (default dist/); its
# path is printed last. KCACHE_DEB_COMPRESSION=gzip makes it several times
# faster and about twice as large as the default xz (the tests use gzip).
# Usage: scripts/build-deb.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
dist=${KCACHE_DIST:-dist}
if [ ! -f "$build/CPackConfig.cmake" ]; then
  echo "build-deb: $build/CPackConfig.cmake is missing: configure and build first (cmake --preset ci && cmake --build --preset ci)" >&2
  exit 1
fi
for tool in dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (Debian: dpkg-dev)" >&2; exit 1; }
done
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/kcache-deb.XXXXXX")
trap 'rm -rf "$out"' EXIT
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$out" \
  -D CPACK_DEBIAN_COMPRESSION_TYPE="${KCACHE_DEB_COMPRESSION:-xz}" >"$out/cpack.log" 2>&1 || {
  cat "$out/cpack.log" >&2
  echo "build-deb: cpack failed" >&2
  exit 1
}
debs=("$out"/kcache_*.deb)
[ -f "${debs[0]}" ] || { cat "$out/cpack.log" >&2; echo "build-deb: cpack made no .deb" >&2; exit 1; }
name=$(basename "${debs[0]}")
mv -f "${debs[0]}" "$dist/$name"
echo "$dist/$name"
