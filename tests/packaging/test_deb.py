"""The Debian package (docs/install.md): what it holds, what it depends on,
and that it installs, serves a user and a CMake project, and uninstalls
cleanly (deb_check.sh, in a mount namespace over overlays of /usr, /etc and
/var, so that the machine itself never changes).

The package is $KCACHE_DEB, else made now by scripts/build-deb.sh from the
ci build (build/ci, which scripts/test.sh builds first).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KCACHE_DEB_BUILD", ROOT / "build" / "ci"))


def project_version() -> str:
    m = re.search(r"project\(kcache VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert m
    return m.group(1)


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("KCACHE_DEB"):
        return Path(os.environ["KCACHE_DEB"])
    if shutil.which("dpkg-deb") is None:
        pytest.skip("not a Debian system (no dpkg-deb)")
    if not (BUILD / "CPackConfig.cmake").exists() or not (BUILD / "bin" / "kcache").exists():
        pytest.skip(f"no built tree at {BUILD} (cmake --preset ci && cmake --build --preset ci)")
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run([str(ROOT / "scripts" / "build-deb.sh"), str(BUILD)], env=dict(os.environ, KCACHE_DIST=str(out), KCACHE_DEB_COMPRESSION="gzip"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def test_contents_and_dependencies(deb: Path) -> None:
    assert deb.name == f"kcache_{project_version()}_{field(deb, 'Architecture')}.deb"
    assert field(deb, "Version") == project_version()
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines() if not line.startswith("d")}
    for want in ["/usr/bin/kcache", "/usr/lib/kcache/libkcache-interpose.so", "/usr/lib/kcache/kcache_onnx.so",
                 "/usr/include/kcache/store.hpp", "/usr/lib/cmake/kcache/kcacheConfig.cmake",
                 "/usr/lib/cmake/kcache/kcacheConfigVersion.cmake", "/usr/lib/pkgconfig/kcache.pc"]:
        assert any(f.endswith(want) for f in files), f"{want} is not in the package:\n{listing}"
    assert any(re.search(r"/usr/lib/(x86_64-linux-gnu/|aarch64-linux-gnu/)?libkcache\.a$", f) for f in files), listing
    # Nothing else: no Python component of a tree that is also a wheel build, no build outputs.
    stray = [f for f in files if not re.match(r"/usr/(bin/kcache$|lib/|include/kcache/)", f)]
    assert not stray, stray
    depends = field(deb, "Depends")
    # From dpkg-shlibdeps (the binaries' own libraries) and the -dev packages a consumer links.
    for pkg in ["libc6", "libzstd1", "libexpected-dev", "libssl-dev", "libzstd-dev"]:
        assert re.search(rf"(^|, ){re.escape(pkg)}( |,|$)", depends), f"{pkg} not in Depends: {depends}"
    assert "libprotobuf" in depends, depends  # the ONNX module's


def test_installs_serves_a_cmake_project_and_uninstalls_cleanly(deb: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("installing into an overlay of /usr needs root and a mount namespace")
    for d in ("upper", "work", "scratch"):
        (tmp_path / d).mkdir()
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", str(Path(__file__).with_name("deb_check.sh")), str(deb),
         str(tmp_path / "upper"), str(tmp_path / "work"), str(Path(__file__).with_name("consumer")),
         str(tmp_path / "scratch")],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, LD_LIBRARY_PATH=""))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"version kcache {project_version()}" in out or re.search(rf"version .*{project_version()}", out), out
    assert "consumer ok " in out and "kcache_DIR:PATH=/usr/lib/" in out, out
    assert f"pkg-config {project_version()}" in out, out
    assert "removed cleanly" in out, out
    # The machine itself is untouched.
    assert not Path("/usr/lib/kcache/libkcache-interpose.so").exists()
