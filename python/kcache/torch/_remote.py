"""Inductor's remote caches over kcache: one RemoteCacheBackend per cache (docs/torch.md).

Inductor reaches each of its remote caches through a class of torch/_inductor/remote_cache.py
(``RemoteFxGraphCache``, ``RemoteAOTAutogradCache``, ``RemoteAutotuneCache``,
``RemoteBundledAutotuneCache``, ``RemoteDynamoPGOCache``) whose ``backend_override_cls``, when
set, makes the backend that stores its bytes. kcache.torch sets it on each class to a
``KCacheBackend`` bound to that cache: ``get(key)`` returns the verified payload of the key's
entry (the JSON bytes Inductor's serde wrote: a base64 pickle for graphs and PGO profiles, the
best config for autotune results) or None; ``put(key, data)`` publishes one entry.

- FX graphs and AOTAutograd entries are written once per key (the first writer wins) and get
  single-flight: a miss takes the key's lease (threads, processes, and with a Redis or S3 team
  remote, hosts), or waits for its holder and returns what the holder published.
- Autotune results, bundled autotune results and PGO profiles are values Inductor updates
  under the same key: a put of a new value replaces the entry (here and on the remote).

Never raises into Inductor: a failing store is a miss (or a skipped put) with one warning.
"""

from __future__ import annotations

import atexit
import functools

from .. import Error, _kcache
from . import _common
from ._common import count, settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .. import Artifact, Store


class Cache:
    """One of Inductor's remote caches as kcache sees it."""

    def __init__(self, cls_name: str, name: str, kind: str, mutable: bool, flight: bool) -> None:
        self.cls_name = cls_name  # the class in torch/_inductor/remote_cache.py
        self.name = name  # in key records, labels and kcache.torch.stats()
        self.kind = kind  # the kcache entry kind
        self.mutable = mutable  # Inductor puts new values under one key: a put replaces
        self.flight = flight  # single-flight between a miss and its put
        self._keys: dict[str, _kcache.Key] = {}

    def fields(self, key: str) -> list[tuple[str, str]]:
        fields = [("kind", self.kind), ("format", _common.KEY_FORMAT), ("torch_version", settings.torch_version),
                  ("cache", self.name), ("key", key)]
        fields += _common.host_fields()
        rank = _rank_field()
        if rank is not None:
            fields.append(("rank", rank))
        return fields

    def kkey(self, key: str) -> tuple[_kcache.Key, list[tuple[str, str]]]:
        fields = self.fields(key)
        memo = "\0".join(v for _, v in fields)
        k = self._keys.get(memo)
        if k is None:
            if len(self._keys) >= 65536:
                self._keys.clear()
            k = self._keys[memo] = _common.kkey(fields)
        return k, fields


CACHES = (
    Cache("RemoteFxGraphCache", "fx-graph", "torch-fx", mutable=False, flight=True),
    Cache("RemoteAOTAutogradCache", "aot-autograd", "torch-aot", mutable=False, flight=True),
    Cache("RemoteAutotuneCache", "autotune", "torch-autotune", mutable=True, flight=False),
    Cache("RemoteBundledAutotuneCache", "bundled-autotune", "torch-bundled-autotune", mutable=True, flight=False),
    Cache("RemoteDynamoPGOCache", "pgo", "torch-pgo", mutable=True, flight=False),
)


def _rank_field() -> str | None:
    """The global rank, when graphs may differ per rank (pytorch#188332), else None.

    Inductor's bucketing passes bake ``dist.get_rank()`` into the code they generate, after its
    key was formed; with one of them on (or ``install(per_rank=True)``), each rank's entries
    are its own. Ranks share everything else.
    """
    want = settings.per_rank
    if want is False:
        return None
    try:
        dist = _common.tmod("torch.distributed")
        if not (dist.is_available() and dist.is_initialized()):
            return None
        if want is None and not _rank_dependent_passes():
            return None
        return f"{dist.get_rank()}/{dist.get_world_size()}"
    except Exception:  # a half-initialized process group: no rank to tell
        return None


def _rank_dependent_passes() -> bool:
    config = _common.tmod("torch._inductor.config")
    for name in ("bucket_all_gathers_fx", "bucket_reduce_scatters_fx", "bucket_all_reduces_fx"):
        if getattr(config, name, "none") not in ("none", None, False):
            return True
    dist_opts = getattr(config, "aten_distributed_optimizations", None)
    for name in ("enable_overlap_scheduling", "collective_bucketing"):
        if dist_opts is not None and getattr(dist_opts, name, None):
            return True
    return False


def _flights_allowed() -> bool:
    if not settings.single_flight:
        return False
    # With every rank's hit or miss agreed on by a collective right after the lookup
    # (torch._functorch.config._sync_cache_decision_cross_ranks), a rank waiting for another
    # rank's compile would block the collective that compile waits for: no single-flight.
    try:
        fconfig = _common.tmod("torch._functorch.config")
        return not getattr(fconfig, "_sync_cache_decision_cross_ranks", False)
    except Exception:
        return True


def _usable(cache: Cache, got: Artifact) -> bytes | None:
    # A verified entry of this key is one this cache wrote, unless a holder of the team key or
    # of this machine's cache directory wrote another: check what kcache can (kind, JSON object).
    data = got.payload
    if got.kind != cache.kind or not (data[:1] == b"{" and data[-1:] == b"}"):
        count(cache.name, "refused")
        _common.warn_once(f"refused-{cache.name}",
                          f"entry {got.key} is not a {cache.kind} value (kind {got.kind}); it is a miss, never loaded")
        return None
    return data


def get(cache: Cache, key: str) -> bytes | None:
    """The verified payload of ``key``'s entry, or None (then this thread may hold its lease)."""
    store = settings.the_store() if settings.on else None
    if store is None:
        return None
    kkey, _ = cache.kkey(key)
    try:
        got, remote = _common.lookup(store, kkey)
        if got is not None:
            data = _usable(cache, got)
            if data is not None:
                _common.count_hit(cache.name, remote)
                if cache.flight:
                    _common.request(store, "served", got)
                return data
        if not cache.flight or not _flights_allowed():
            count(cache.name, "miss")
            return None
        held = _common.held()
        if kkey.hex in held.flights:  # asked again before this thread published it
            count(cache.name, "miss")
            return None
        held.give_up(cache.name)  # this thread's earlier miss of this cache: its compile did not publish
        _ensure_end_callback()
        flight = _kcache._Flight(store, kkey, settings.compile_timeout, _common.ROUTE)  # counts the request
        got = flight.wait()
    except Error as e:
        _common.store_error(cache.name, "lookup", e)
        return None
    if got is not None:
        data = _usable(cache, got)
        if data is not None:
            count(cache.name, "hit_after_wait")
        return data
    held.flights[kkey.hex] = (cache.name, flight)
    count(cache.name, "miss")
    return None


def put(cache: Cache, key: str, data: bytes) -> None:
    """Publishes ``data`` as ``key``'s entry (a mutable cache: replacing a different value)."""
    store = settings.the_store() if settings.on else None
    kkey, fields = cache.kkey(key)
    flight = _common.held().flights.pop(kkey.hex, (None, None))[1]
    if store is None:
        if flight is not None:
            flight.abandon(uncached=True)
        return
    labels = {"torch.cache": cache.name, "torch.key": key[:512], "torch.version": settings.torch_version}
    try:
        artifact = _kcache._record_artifact(_common.DOMAIN, fields, cache.kind, bytes(data), "torch",
                                            settings.torch_version, "", labels)
        if flight is not None:
            flight.deliver(store, artifact)  # the flight counts the request
        elif cache.mutable:
            old = store.get(kkey)
            if old is not None and old.payload == artifact.payload:
                count(cache.name, "put_unchanged")
                return
            if old is not None:
                store.flush()  # a queued put of the old value must not land after the removal
                store.remove(kkey, remote=True)
                count(cache.name, "replaced")
            store.put(artifact)
        else:
            store.put(artifact)
            if cache.flight:
                _common.request(store, "compiled")  # a graph compiled without a lease
    except (Error, ValueError) as e:
        if flight is not None:
            flight.abandon(uncached=True)
        elif cache.flight:
            _common.request(store, "uncached")
        count(cache.name, "error")
        _common.warn_once(f"put-{cache.name}", f"cannot store Inductor's {cache.name} entry ({e}); it is compiled, "
                                               "not cached")
        return
    count(cache.name, "put")


_end_callback_on = False


def _compile_ended(_args: Any = None) -> None:
    # torch._dynamo runs end-of-compile callbacks when its outermost compile in this process
    # ends (it counts them across threads): no compile is in progress, so a key still held
    # belongs to a compile that did not publish it (it raised, or bypassed the cache).
    _common.give_up_all()


def _ensure_end_callback() -> None:
    # Registered at the first miss, inside a compile: importing torch._dynamo at install()
    # would cost every program that imports torch without compiling.
    global _end_callback_on
    if _end_callback_on:
        return
    _end_callback_on = True
    try:
        _common.tmod("torch._dynamo").callback_handler.register_end_callback(_compile_ended)
    except Exception as e:
        _common.warn_once("callback", f"cannot register an end-of-compile callback ({e}); a compile that raises "
                                      f"holds its key up to compile_timeout ({settings.compile_timeout:g} s)")


def remove_end_callback() -> None:
    global _end_callback_on
    if not _end_callback_on:
        return
    _end_callback_on = False
    try:
        _common.tmod("torch._dynamo").callback_handler.remove_end_callback(_compile_ended)
    except Exception:
        pass


@atexit.register
def _forget() -> None:
    # Keys are the extension's objects: none may outlive it at interpreter exit.
    for cache in CACHES:
        cache._keys.clear()


_backend_cls: Any = None


def backend_class() -> Any:
    """``KCacheBackend``: Inductor's RemoteCacheBackend over kcache, made once (imports Inductor)."""
    global _backend_cls
    if _backend_cls is None:
        base = _common.tmod("torch._inductor.remote_cache").RemoteCacheBackend

        class KCacheBackend(base):  # type: ignore[misc, valid-type]
            """Inductor's remote cache backend over kcache's store (kcache.torch._remote)."""

            def __init__(self, cache: Cache) -> None:
                super().__init__()
                self._cache = cache

            def _get(self, key: str) -> bytes | None:
                return get(self._cache, key)

            def _put(self, key: str, data: bytes) -> None:
                put(self._cache, key, data)

        KCacheBackend.__module__ = __name__
        _backend_cls = KCacheBackend
    return _backend_cls


def factory(cache: Cache) -> Any:
    """What ``backend_override_cls`` is set to: a callable with no arguments making the backend."""
    return functools.partial(backend_class(), cache)
