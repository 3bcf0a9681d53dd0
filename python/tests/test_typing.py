"""The package's type stubs (.pyi) and annotations, checked with mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "--python-version", "3.10",
         "--follow-imports=silent", *args],
        capture_output=True, text=True, cwd=HERE, timeout=300,
    )


def test_the_package_and_a_typed_user_check_clean() -> None:
    pytest.importorskip("mypy")
    p = mypy("-p", "kcache")
    assert p.returncode == 0, p.stdout + p.stderr
    p = mypy(str(HERE / "typing" / "usage.py"))
    assert p.returncode == 0, p.stdout + p.stderr


def test_wrong_uses_are_rejected_by_the_stubs() -> None:
    pytest.importorskip("mypy")
    p = mypy(str(HERE / "typing" / "misuse.py"))
    assert p.returncode == 1
    errors = [line for line in p.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 5, p.stdout
