"""The sdist (docs/install.md): made by scikit-build-core from the checkout,
it holds the sources and none of the build outputs, has the project's one
version, and a build from it on a machine that lacks a library stops at
once with a message naming each missing one and its Debian package.
(Building the whole wheel from it is what `pip install .` and
scripts/build-wheel.sh do already; not repeated here.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("scikit_build_core")


def project_version() -> str:
    m = re.search(r"project\(kcache VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert m
    return m.group(1)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    code = "import sys; from scikit_build_core.build import build_sdist; print(build_sdist(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def test_holds_the_sources_and_the_version(sdist: Path) -> None:
    version = project_version()
    assert sdist.name == f"kcache-{version}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"kcache-{version}/PKG-INFO")
        assert pkg_info is not None
        assert f"Version: {version}" in pkg_info.read().decode()
    for want in ["CMakeLists.txt", "pyproject.toml", "cmake/kcacheDependencies.cmake", "python/kcache/__init__.py",
                 "python/CMakeLists.txt", "src/cli/main.cpp", "include/kcache/store.hpp", "scripts/bootstrap.sh"]:
        assert want in names, f"{want} is not in the sdist"
    for unwanted in ["build/", ".venv/", "dist/", ".tools/"]:
        assert not any(n.startswith(unwanted) for n in names), f"{unwanted} is in the sdist"


def test_a_missing_library_is_named_with_its_debian_package(sdist: Path, tmp_path: Path) -> None:
    # As on a machine without toml++ and CLI11: the configure step of
    # `pip install kcache-*.tar.gz` stops with one message naming both.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         "-C", "cmake.define.CMAKE_DISABLE_FIND_PACKAGE_tomlplusplus=ON",
         "-C", "cmake.define.CMAKE_DISABLE_FIND_PACKAGE_CLI11=ON",
         "-C", f"build-dir={tmp_path / 'build'}", "-w", str(tmp_path / "wheel"), str(sdist)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1"))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "kcache cannot be built here: missing" in out, out
    assert "tomlplusplus (Debian: libtomlplusplus-dev)" in out and "CLI11 (Debian: libcli11-dev)" in out, out
    assert "nlohmann" not in out.split("kcache cannot be built here")[1].split("scripts/bootstrap.sh")[0], out
    assert not list((tmp_path / "wheel").glob("*.whl"))
