"""kcache.cuda_core: kcache as the cache of cuda.core's ``Program.compile``.

Importing this module imports cuda.core (``import kcache`` alone does not).

- ``ProgramCache``: a ``cuda.core.utils.ProgramCacheResource`` backed by
  kcache's configured stores, so that::

      Program(src, "c++", options).compile("cubin", cache=kcache.cuda_core.ProgramCache())

  works unchanged, with kcache's verified reads (a damaged entry is a miss,
  never returned), size cap shared by every process, stats and remote tier,
  and one compile per key across threads, processes and hosts (single-flight).
  Keys are cuda.core's own (``make_program_cache_key``); values are the raw
  compiled bytes.

- ``compile(program_source, options, target_type)``: compiles through kcache's
  own complete keys, so the compiles cuda.core refuses to cache (include paths,
  headers on disk, name expressions) are cached too, and an ObjectCode from a
  hit carries its ``symbol_mapping`` (name expression -> lowered name) even in
  a new process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

# cuda.core ships no top-level py.typed: its names are Any to a type checker.
from cuda.core import ObjectCode, Program, ProgramOptions  # type: ignore[import-untyped]
from cuda.core.utils import ProgramCacheResource  # type: ignore[import-untyped]

from . import _kcache, _store_for, default_store, open_store
from . import CacheError, Config, Store

__all__ = ["ProgramCache", "compile"]

# Entries written by ProgramCache have this kind; __len__ and clear() see only them.
ENTRY_KIND = "cuda-core"
_DOMAIN = "cuda-core"  # a key record domain is [a-z0-9_-]{1,32} (docs/passport.md)


def _key_bytes(key: object) -> bytes:
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"cache keys must be bytes or str, got {type(key).__name__}")


def _value_bytes(value: object) -> bytes | bytearray | memoryview:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    if isinstance(value, ObjectCode):
        code = value.code
        if isinstance(code, str):
            try:
                with open(code, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"cannot store path-backed ObjectCode in cache: {code} no longer exists"
                ) from None
        return bytes(code)
    raise TypeError(f"cache values must be bytes-like or ObjectCode, got {type(value).__name__}")


class ProgramCache(ProgramCacheResource):  # type: ignore[misc]
    """cuda.core's ProgramCacheResource over kcache's stores.

    ``store``: a ``kcache.Store`` to use (not closed by ``close()``). Without
    it, ``config`` (a ``kcache.Config``) opens a store this cache owns, and
    with neither the process-wide ``kcache.default_store()`` is used.

    ``__getitem__`` returns the verified bytes (KeyError on a miss; a damaged
    entry is a miss and is removed). ``__setitem__`` accepts bytes-like values
    or an ObjectCode. ``len()`` and ``clear()`` count and remove the entries
    written through this class (kind "cuda-core"), not the rest of the cache.

    Single-flight, as ``kcache.compile``: a miss (``get``, ``[]``) takes the
    key's lease across threads, processes and, with a Redis remote, hosts, or
    waits for its holder and returns what the holder published. The caller
    that got the miss compiles and sets the key (``Program.compile(...,
    cache=...)`` does exactly that), which publishes it and releases the
    lease. A miss that is never set (the compile raised) is given up by the
    thread's next miss, by ``close()``, or after ``compile_timeout`` seconds;
    then a waiter compiles itself.

    Removing (``del cache[key]``, ``remove``, ``clear``) is local: the entry
    leaves this machine's tiers and stays on the team's remote, like ``kcache
    clear``; ``remove(key, remote=True)`` and ``clear(remote=True)`` delete
    the remote objects too.
    Thread-safe; the GIL is released during reads, waits and writes.
    """

    def __init__(
        self, store: Store | None = None, *, config: Config | None = None, compile_timeout: float = 600.0
    ) -> None:
        self._owned = False
        if compile_timeout <= 0:
            raise ValueError(f"compile_timeout must be > 0 seconds, got {compile_timeout!r}")
        if store is None and config is not None:
            store = open_store(config)
            self._owned = True
        if store is None:
            store = default_store()
            if store is None:
                raise CacheError("the kcache cache could not be opened (see the warning above)", "io")
        self._store: Store = store
        self._version = _kcache.__version__
        self._compile_timeout = float(compile_timeout)
        self._local = threading.local()  # .flights: the misses this thread is to set

    @property
    def store(self) -> Store:
        """The kcache store behind this cache."""
        return self._store

    def _kkey(self, key: object) -> _kcache.Key:
        return _kcache._domain_key(_DOMAIN, _key_bytes(key))

    def _flights(self) -> dict[bytes, _kcache._Flight]:
        flights: dict[bytes, _kcache._Flight] | None = getattr(self._local, "flights", None)
        if flights is None:
            flights = self._local.flights = {}
        return flights

    def _abandon_flights(self) -> None:
        flights = self._flights()
        for flight in flights.values():
            flight.abandon()
        flights.clear()

    def _lookup(self, key: object) -> bytes | None:
        kb = _key_bytes(key)
        kkey = _kcache._domain_key(_DOMAIN, kb)
        got = self._store.get(kkey)
        if got is not None:
            # One request, served (`kcache stats`); a miss is counted by its flight below.
            _kcache._record_request(self._store, _DOMAIN, "served", got.served_from, got.compile_duration_us)
            return got.payload
        # A miss this thread took before and never set: its compile failed.
        self._abandon_flights()
        flight = _kcache._Flight(self._store, kkey, self._compile_timeout, _DOMAIN)
        got = flight.wait()
        if got is not None:
            return got.payload  # published by the holder we waited for (counted by the flight)
        self._flights()[kb] = flight
        return None

    def __getitem__(self, key: bytes | str) -> bytes:
        got = self._lookup(key)
        if got is None:
            raise KeyError(key)
        return got

    def get(self, key: bytes | str, default: bytes | None = None) -> bytes | None:
        """Return the cached bytes of ``key``, or ``default`` on a miss (then set the key)."""
        got = self._lookup(key)
        return default if got is None else got

    def __setitem__(self, key: bytes | str, value: Any) -> None:
        kb = _key_bytes(key)
        artifact = _kcache._domain_artifact(_DOMAIN, kb, ENTRY_KIND, _value_bytes(value), "cuda.core", self._version)
        flight = self._flights().pop(kb, None)
        if flight is not None:
            flight.deliver(self._store, artifact)
        else:
            self._store.put(artifact)

    def __delitem__(self, key: bytes | str) -> None:
        if not self._store.remove(self._kkey(key)):
            raise KeyError(key)

    def remove(self, key: bytes | str, *, remote: bool = False) -> bool:
        """Remove ``key`` from this machine's tiers (and, with ``remote=True``, from the remote); True when held."""
        return self._store.remove(self._kkey(key), remote=remote)

    def __len__(self) -> int:
        return sum(1 for e in self._store.list() if e.kind == ENTRY_KIND)

    def clear(self, *, remote: bool = False) -> None:
        """Remove every local entry written through ProgramCache (kind "cuda-core").

        ``remote=True`` deletes their objects on the remote tiers too (only the
        entries this machine lists: a remote is not enumerated).
        """
        for e in self._store.list():
            if e.kind == ENTRY_KIND:
                self._store.remove(e.key, remote=remote)

    def close(self) -> None:
        """Give up this thread's unset misses, publish queued writes; close the store if this cache opened it."""
        self._abandon_flights()
        if self._owned:
            self._store.close()
        elif not self._store.closed:
            self._store.flush()


_FROM = {
    "cubin": ObjectCode.from_cubin,
    "ptx": ObjectCode.from_ptx,
    "ltoir": ObjectCode.from_ltoir,
}


def compile(
    program_source: str | bytes,
    options: ProgramOptions | None,
    target_type: str,
    *,
    name_expressions: Sequence[str] = (),
    code_type: str = "c++",
    store: Store | None = None,
    source_path: str | os.PathLike[str] | None = None,
) -> ObjectCode:
    """Compile like ``Program(program_source, code_type, options).compile(target_type, name_expressions)``.

    For "c++" sources the compile goes through kcache with its complete keys:
    the options exactly as cuda.core passes them to NVRTC, the content of every
    header the source can include from disk (``include_path``, the directory of
    ``source_path``, else the working directory), and the name expressions.
    The returned ObjectCode has the same bytes, ``name`` and ``symbol_mapping``
    as cuda.core's own compile, on a hit in a new process too. Options kcache
    cannot key (PCH creation, side effects) compile without the cache. Other
    code types ("ptx", "nvvm") are compiled by cuda.core, uncached.

    ``store``: the kcache store (default: ``kcache.default_store()``).
    Raises kcache.CompileError with NVRTC's log on a failed compile.
    """
    if options is None:
        options = ProgramOptions()
    if code_type.lower() != "c++" or target_type not in _FROM:
        return Program(program_source, code_type, options).compile(target_type, name_expressions)
    if not isinstance(name_expressions, (tuple, list)):
        name_expressions = tuple(name_expressions)  # iterated twice below
    name = options.name
    # kcache.compile, with the request counted as cuda.core's (`kcache stats`). The
    # options go as the bytes cuda.core gives NVRTC (a warm hit is a few microseconds:
    # no decoding and no copies here), formatted once per options object while none
    # of its fields changed (python/src/py_options_memo.cpp).
    artifact = _kcache._compile(
        _store_for(store, True), program_source, target_type, "",
        _kcache._cuda_core_options(options, "nvrtc", target_type), name_expressions, None, (), name,
        None if source_path is None else str(source_path), _DOMAIN,
    )
    if not name_expressions:
        return _FROM[target_type](artifact.payload, name=name, symbol_mapping=None)
    lowered = artifact.lowered_names
    mapping = {expr: lowered[expr].encode() for expr in name_expressions if expr in lowered}
    return _FROM[target_type](artifact.payload, name=name, symbol_mapping=mapping or None)


