"""kcache.plan: build the binaries a plan file lists (as ``kcache plan build``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _kcache
from . import Store, default_store


@dataclass(frozen=True)
class EntryResult:
    """What happened to one plan entry."""

    name: str
    outcome: str  # "built", "reused", "fetched", "failed", "not_started"
    path: str  # the published file
    sidecar: str  # its .sha256 sidecar
    key: str
    sha256: str
    size: int
    seconds: float | None  # build time, BUILT only
    saved_seconds: float  # REUSED / FETCHED: the build time it saved
    reason: str  # why it was (re)built
    error: str  # FAILED: what went wrong
    log: str  # FAILED: the tool's log tail


def build(
    path: str | os.PathLike[str],
    host: str | None = None,
    jobs: int = 1,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    *,
    keep_going: bool = False,
    store: Store | None = None,
    cache: bool = True,
) -> list[EntryResult]:
    """Build or reuse every entry of the plan at ``path`` for this host.

    ``host`` is a fingerprint like "sm=87,jp=6.2,trt=10.3" (default: probed).
    ``jobs`` entries are built at once. ``on_event`` receives each event
    (engine.cache.hit, engine.build.summary ...) as a dict, one at a time; an
    exception it raises is re-raised after the build. The content cache is
    ``store`` (default: ``default_store()``; ``cache=False``: none).

    A failed entry is an outcome ("failed", with ``error``), not an exception;
    raises InvalidArgument for an invalid plan (``.log`` lists every problem),
    Unsupported for ONNX entries (use the kcache command).
    """
    s = (store if store is not None else default_store()) if cache else None
    rows = _kcache._plan_build(os.fspath(path), host, jobs, keep_going, s, on_event)
    return [EntryResult(**{**row, "outcome": row["outcome"].lower()}) for row in rows]
