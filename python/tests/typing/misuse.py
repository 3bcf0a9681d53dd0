"""Wrong uses that mypy must reject (tests/test_typing.py counts the errors)."""

from __future__ import annotations

import kcache

kcache.compile(42)
kcache.compile("src", arch=90)
kcache.open_store("not a config")
key: kcache.Key = kcache.compile("src")
payload: str = kcache.compile("src").payload
