"""What kcache's framework integrations (kcache.triton, kcache.jax, kcache.torch) share.

Each integration warns at most once per topic and process, and uses the store its
``install(store=...)`` was given while that store is open, else the process-wide
``kcache.default_store()``.
"""

from __future__ import annotations

import _thread
import os

from . import default_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import Store

_lock = _thread.allocate_lock()


def _forget_after_fork() -> None:
    global _lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_after_fork)


def warn_once(seen: set[str], prefix: str, what: str, message: str) -> None:
    """One RuntimeWarning "<prefix>: <message>" per ``what`` in ``seen``, pointing at the code
    that called the integration's own warn-once function."""
    with _lock:
        if what in seen:
            return
        seen.add(what)
    import warnings

    warnings.warn(f"{prefix}: {message}", RuntimeWarning, stacklevel=4)


def live_store(store: Store | None) -> Store | None:
    """``store`` while it is open, else ``kcache.default_store()``."""
    if store is not None and not store.closed:
        return store
    return default_store()
