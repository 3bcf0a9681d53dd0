"""What kcache's framework integrations (kcache.triton, kcache.jax, kcache.torch) share.

Each integration warns at most once per topic and process, and uses the store its
``install(store=...)`` was given while that store is open, else the process-wide
``kcache.default_store()``.
"""

from __future__ import annotations

import _thread
import os
from typing import Generic, TypeVar

from . import default_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from . import Store

T = TypeVar("T")

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


class PerThread(Generic[T]):
    """One ``T`` per thread, made by ``make()`` on the thread's first ``get()``. A forked child
    starts with none: what the parent's threads held (their leases) is the parent's."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._local: Any = None  # threading.local(), made on first use (import threading costs)
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._local = None

    def get(self) -> T:
        if self._local is None:
            import threading

            with _lock:
                if self._local is None:
                    self._local = threading.local()
        value: T | None = getattr(self._local, "value", None)
        if value is None:
            value = self._local.value = self._make()
        return value
