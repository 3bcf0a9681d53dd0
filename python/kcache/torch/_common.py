"""What every part of kcache.torch shares: its settings, one-time warnings, the outcome counters,
the single-flight keys each thread holds, and the key fields every torch entry carries.

Thread-safe: a module lock guards the tables; a fork gives the child fresh ones (its parent's
flights are not the child's to deliver).
"""

from __future__ import annotations

import _thread
import atexit
import os
import sys
import weakref

from .. import Error, _count_request, _integration, _kcache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .. import Artifact, Store

DOMAIN = "torch"  # the key record's domain of every entry kcache.torch writes
KEY_FORMAT = "1"  # the version of the key fields below; a change makes every key new

_lock = _thread.allocate_lock()


class Settings:
    """What install() set. ``on`` is False until install() succeeded and after uninstall()."""

    def __init__(self) -> None:
        self.on = False
        self.store: Store | None = None  # install(store=...); None: kcache.default_store()
        self.compile_timeout = 3600.0
        self.single_flight = True
        self.per_rank: bool | None = None  # None: when a rank-dependent Inductor pass is on
        self.torch_version = ""

    def the_store(self) -> Store | None:
        return _integration.live_store(self.store)


settings = Settings()

_warned: set[str] = set()


def warn_once(what: str, message: str) -> None:
    """One RuntimeWarning per ``what`` and process, prefixed "kcache.torch: "."""
    _integration.warn_once(_warned, "kcache.torch", what, message)


# ---- outcomes ----------------------------------------------------------------------------------

# Per cache (its short name, e.g. "fx-graph") and outcome, this process's counts:
#   hit              a verified entry served from this machine (memory or disk tier)
#   hit_remote       a verified entry that came from a remote tier (and is now on this machine)
#   hit_after_wait   served the entry another process or host published while this one waited
#   miss             no usable entry: Inductor compiles (and this process holds the key)
#   put              an entry published (or queued) by this process
#   put_unchanged    a put of what the entry already holds (a mutable cache): nothing written
#   replaced         a mutable cache's entry replaced by a new value
#   refused          a verified entry that is not one this cache wrote (wrong kind or shape): a miss
#   error            the store failed: the lookup or put was skipped (warned once)
OUTCOMES = ("hit", "hit_remote", "hit_after_wait", "miss", "put", "put_unchanged", "replaced", "refused", "error")
_counts: dict[str, dict[str, int]] = {}


def count(cache: str, outcome: str, n: int = 1) -> None:
    with _lock:
        row = _counts.get(cache)
        if row is None:
            row = _counts[cache] = dict.fromkeys(OUTCOMES, 0)
        row[outcome] += n


def counts() -> dict[str, dict[str, int]]:
    with _lock:
        return {cache: dict(row) for cache, row in _counts.items()}


def reset_counts() -> None:
    with _lock:
        _counts.clear()


# ---- the keys each thread holds ----------------------------------------------------------------


class Held:
    """The single-flight keys one thread holds: misses whose compile has not published yet.

    Keyed by kcache key hex; each with the cache it belongs to. Given up (abandoned: nothing
    stored, a waiter elsewhere compiles) by the thread's next miss of the same cache (Inductor
    compiles one graph of a cache at a time per thread, and publishes it before the next),
    by the end of the compile that made them (torch._dynamo's end-of-compile callback), by
    uninstall(), or after ``compile_timeout`` seconds at the latest.
    """

    def __init__(self) -> None:
        self.flights: dict[str, tuple[str, Any]] = {}

    def give_up(self, cache: str | None = None) -> None:
        for key_hex, (name, flight) in list(self.flights.items()):
            if cache is None or name == cache:
                del self.flights[key_hex]
                # Inductor compiled it and never published it (it bypassed its cache, or the
                # compile raised: kcache cannot tell): counted as compiled without the cache.
                flight.abandon(uncached=True)

    def __del__(self) -> None:
        self.give_up()


_all_held: weakref.WeakSet[Held] = weakref.WeakSet()  # of every live thread, for give_up_all()


def _new_held() -> Held:
    h = Held()
    with _lock:
        _all_held.add(h)
    return h


held = _integration.PerThread(_new_held).get  # the single-flight keys this thread holds


def give_up_all() -> None:
    """Abandon every flight of every thread (no compile of this process is in progress)."""
    with _lock:
        everyone = list(_all_held)
    for h in everyone:
        h.give_up()


@atexit.register
def _forget_at_exit() -> None:
    # The extension's objects (flights, the store) must not outlive it at interpreter exit.
    global _last_store
    give_up_all()
    settings.store = None
    _last_store = None


def _forget_after_fork() -> None:
    global _lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork
    _all_held.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


# ---- key fields ---------------------------------------------------------------------------------

_host_fields: list[tuple[str, str]] | None = None


def host_fields() -> list[tuple[str, str]]:
    """The fields of every key that Inductor's own keys leave out but its output depends on.

    ``python``: the interpreter (implementation, major.minor): Inductor's C++ kernels are Python
    extensions and its pickles name the interpreter's classes. ``cpu``: the machine and the
    vector ISA ATen dispatches to here (``torch.backends.cpu.get_cpu_capability()``): Inductor's
    CPU code is generated for it (its tiling), and its own keys do not say which.
    """
    global _host_fields
    if _host_fields is None:
        import platform

        torch = tmod("torch")
        impl = sys.implementation.name
        py = f"{impl}-{sys.version_info[0]}.{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
        try:
            capability = str(torch.backends.cpu.get_cpu_capability())
        except Exception:  # an old torch: the machine alone
            capability = "unknown"
        _host_fields = [("python", py), ("cpu", f"{platform.machine()}:{capability}")]
    return _host_fields


_last_store: tuple[Any, bool] | None = None  # (store, whether it has a remote tier)


def _has_remote(store: Store) -> bool:
    global _last_store
    last = _last_store
    if last is None or last[0] is not store:
        try:
            remote = bool(store.config["remote"])
        except Exception:
            remote = False
        _last_store = last = (store, remote)
    return last[1]


def _remote_hits(store: Store) -> int:
    return sum(int(r.get("hits", 0)) for r in store.stats().get("remote", ()))


def lookup(store: Store, key: _kcache.Key) -> tuple[Artifact | None, bool]:
    """``store.get(key)``, and whether the hit came from a remote tier (the store's remote hit
    counters moved: a few microseconds). Raises kcache.Error as ``get`` does."""
    if not _has_remote(store):
        return store.get(key), False
    before = _remote_hits(store)
    got = store.get(key)
    return got, got is not None and _remote_hits(store) > before


ROUTE = "torch"  # the route of kcache.torch's requests in `kcache stats`


def request(store: Store, outcome: str, got: Artifact | None = None, compile_us: int = 0) -> None:
    """Counts one request of Inductor's that ended (``kcache stats``, route "torch"): a graph,
    a C++ build or a vector ISA check, served (``got`` says from which tier and what it saved),
    or compiled, uncached or failed. A request that took a single-flight lease is counted by
    its flight (made with ROUTE) instead. Autotune results and PGO profiles are values, not
    compiles: not counted."""
    if got is None:
        _count_request(store, ROUTE, outcome, None, compile_us)
    else:
        _count_request(store, ROUTE, outcome, got.served_from, got.compile_duration_us)


def count_hit(cache: str, remote: bool) -> None:
    count(cache, "hit_remote" if remote else "hit")


def tmod(name: str) -> Any:
    """A module of torch, typed Any: its internals are reached by name (they move between
    releases, and install() checks each one), and type checkers need not read torch."""
    import importlib

    return importlib.import_module(name)


def store_error(cache: str, what: str, e: Exception) -> None:
    count(cache, "error")
    warn_once(f"store-{what}", f"the kcache store failed ({e}); torch.compile goes on without it for this {what}")


def kkey(fields: list[tuple[str, str]]) -> _kcache.Key:
    return _kcache._key_of_values(DOMAIN, fields)
