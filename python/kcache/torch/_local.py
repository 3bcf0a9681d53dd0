"""Inductor's own local copies of what kcache now holds, turned off while it holds it.

With the FX graph cache on kcache (``fx_graph_cache=False``), Inductor still reads its own
directory in one place: loading an AOTAutograd entry reads the graphs it names with
``local=True``; and ``AOTAutogradCache.save`` writes every entry to its own directory whatever
``enable_autograd_cache`` says. Those are pickles nobody verifies, in a directory without a cap
(by default under /tmp). kcache.torch wraps the two places, while installed:

- ``GuardedCache.iterate_over_candidates`` (the one reader of both caches' local entries) is
  asked with ``local=False`` for a cache kcache holds;
- ``AOTAutogradCache._write_to_local_cache`` writes nothing while kcache holds that cache.

Both are guarded: missing in a torch whose internals moved, they are left alone (one warning
from install(): Inductor's own copies are then still written and read).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_owned: set[str] = set()  # the GuardedCache subclasses (class names) whose local copies are off
_orig_iterate: Any = None
_orig_write: Any = None


def own(owned: set[str]) -> None:
    """Inductor's local copies are off for these GuardedCache subclasses (class names) from now on."""
    _owned.clear()
    _owned.update(owned)


def patch_codecache() -> list[str]:
    """Wraps the reader of local candidates (codecache has loaded); what could not be wrapped."""
    global _orig_iterate
    from . import _common

    codecache = _common.tmod("torch._inductor.codecache")
    guarded = getattr(codecache, "GuardedCache", None)
    current = getattr(guarded, "__dict__", {}).get("iterate_over_candidates")
    if _orig_iterate is not None:
        return []
    if not isinstance(current, classmethod):
        return ["torch._inductor.codecache.GuardedCache.iterate_over_candidates"]
    _orig_iterate = current
    inner = current.__func__

    def iterate_over_candidates(cls: Any, local: bool, remote_cache: Any, key: str) -> Any:
        return inner(cls, local and cls.__name__ not in _owned, remote_cache, key)

    iterate_over_candidates.__doc__ = inner.__doc__
    setattr(guarded, "iterate_over_candidates", classmethod(iterate_over_candidates))  # noqa: B010
    return []


def patch_autograd_cache() -> list[str]:
    """Wraps AOTAutograd's local writer (its module has loaded); what could not be wrapped."""
    global _orig_write
    from . import _common

    aot = getattr(_common.tmod("torch._functorch._aot_autograd.autograd_cache"), "AOTAutogradCache", None)
    write = getattr(aot, "__dict__", {}).get("_write_to_local_cache")
    if _orig_write is not None:
        return []
    if not isinstance(write, staticmethod):
        return ["torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache._write_to_local_cache"]
    _orig_write = write
    real = write.__func__

    def _write_to_local_cache(key: str, content: bytes) -> None:
        if "AOTAutogradCache" not in _owned:
            real(key, content)

    setattr(aot, "_write_to_local_cache", staticmethod(_write_to_local_cache))  # noqa: B010
    return []


def uninstall() -> None:
    global _orig_iterate, _orig_write
    import sys

    _owned.clear()
    if _orig_iterate is not None:
        sys.modules["torch._inductor.codecache"].GuardedCache.iterate_over_candidates = _orig_iterate
        _orig_iterate = None
    if _orig_write is not None:
        sys.modules["torch._functorch._aot_autograd.autograd_cache"].AOTAutogradCache._write_to_local_cache = _orig_write
        _orig_write = None
