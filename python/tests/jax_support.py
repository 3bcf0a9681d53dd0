"""What python/tests/test_jax*.py share: real jax, or the test module skipped.

A module skips only when jax cannot be imported and KCACHE_REQUIRE_TOOLKIT is
unset; CI sets it, and there a missing jax fails."""

from __future__ import annotations

import os
from types import ModuleType

import pytest


def import_jax_or_skip() -> ModuleType:
    try:
        import jax
    except ImportError as e:  # pragma: no cover - depends on the environment
        if os.environ.get("KCACHE_REQUIRE_TOOLKIT"):
            raise ImportError(f"KCACHE_REQUIRE_TOOLKIT is set but jax cannot be imported: {e}") from e
        pytest.skip(f"jax is not installed ({e}); scripts/python-venv.sh test installs it", allow_module_level=True)
    return jax
