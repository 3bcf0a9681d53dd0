"""kcache.jax: XLA executables behind JAX's persistent compilation cache, as kcache entries (docs/jax.md).

One line turns it on::

    import kcache.jax; kcache.jax.install()

or, for a program you cannot edit, the environment alone: ``KCACHE_JAX=1``
(``kcache-autoload.pth`` runs ``install()`` right after ``jax`` imports, in
every process of the job; ``install()`` sets the variable so that the
subprocesses a program starts inherit it).

Then every executable JAX would write to its persistent compilation cache is
one kcache entry instead (the same C++ library and on-disk cache as every
other kcache entry, its size cap, its remote tiers):

- **One entry per executable**, kind ``jax-executable``. The payload is the
  value JAX's cache is given (JAX's compressed compile time + serialized
  executable, unchanged); the passport names jax, jaxlib, the backend, JAX's
  own key and the compile time (what a hit saves, what cost-aware eviction
  weighs). Every read is verified (size, SHA-256, key record): a damaged entry
  is a miss, removed, counted. An entry that verifies but that JAX cannot load
  (forged, or written by a broken writer) is a miss too, with one warning: it
  is removed and the function compiled again; XLA never sees bytes kcache did
  not check, and a load failure is never an error.
- **Keys stay JAX's.** kcache's key is JAX's key plus what JAX's leaves out:
  the jax version, and on the CPU backend the host CPU (XLA:CPU compiles for
  the CPU it runs on).
- **One compile per key** across threads, processes and (with a Redis or S3
  remote) hosts: a miss takes the key's single-flight lease, or waits for the
  holder and loads what it published. Whichever process misses first compiles
  and writes, not only process 0 of a multi-process job (JAX's own rule, kept
  against write contention on shared file systems, which a kcache entry with
  its one commit point does not have). A holder that dies, fails or hangs
  lets a waiter take over.
- **Compiles under JAX's threshold** (``jax_persistent_cache_min_compile_time_secs``,
  1 s by default) are not stored, as without kcache; a small note (kind
  ``jax-not-stored``) says so, so that the other processes compile them at
  once, in parallel, instead of waiting in turn. ``install(min_compile_time_secs=0)``
  stores every compile: kcache's put is cheap and its cap evicts the cheapest
  entries first.

Importing this module does not import JAX; ``install()`` does.
"""

from __future__ import annotations

import _thread
import os
import time

from . import Error, _count_request, _integration, _kcache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from . import Store

__all__ = ["KIND", "NOTE_KIND", "TESTED_JAX", "install", "installed", "key_fields", "stats", "uninstall",
           "why_unsupported"]

KIND = "jax-executable"
NOTE_KIND = "jax-not-stored"
# The jax versions whose internals kcache.jax was tested against (oldest, newest); see docs/jax.md.
TESTED_JAX = ("0.4.38", "0.10.2")
_DOMAIN = "jax"
_KEY_FORMAT = "1"
_NOTE_MAGIC = "kcache-jax-note 1"
_VIEW_MIN_BYTES = 1 << 20

# ---- settings and per-process state -------------------------------------------------------------

_lock = _thread.allocate_lock()
_warned: set[str] = set()
_store: Store | None = None  # install(store=...); None: kcache.default_store()
_compile_timeout = 3600.0
_seams: Any = None  # the _Seams of JAX's internals while installed
_counts: dict[str, float] = {}


def _count(what: str, n: float = 1) -> None:
    with _lock:
        _counts[what] = _counts.get(what, 0) + n


def stats() -> dict[str, float]:
    """This process's outcomes: what JAX asked of kcache and what kcache did.

    ``hits`` (served from the store), ``hits_after_wait`` (another process
    compiled it while this one waited), ``compiled`` (compiled here and
    stored), ``not_stored`` (compiled here, not stored: under JAX's
    thresholds or with host callbacks), ``skipped_by_note`` (compiled here
    at once, without waiting, as a note said), ``bad_entries`` (entries JAX
    could not load: removed, compiled again), ``errors`` (the store failed:
    compiled without it), ``compile_seconds_saved`` (the compile time of the
    executables served).
    """
    with _lock:
        out = {k: 0.0 for k in ("hits", "hits_after_wait", "compiled", "not_stored", "skipped_by_note",
                                "bad_entries", "errors")}
        out.update(_counts)
        out.setdefault("compile_seconds_saved", 0.0)
    return out


def _warn_once(what: str, message: str) -> None:
    _integration.warn_once(_warned, "kcache.jax", what, message)


def _the_store() -> Store | None:
    return _integration.live_store(_store)


class _Thread:
    """What one thread is doing for JAX: the key it reads, the keys whose lease it holds."""

    def __init__(self) -> None:
        self.reading = ""  # JAX key get_executable_and_time is reading
        self.backend: Any = None  # the backend of the compile this thread is in
        self.served: dict[str, Any] = {}  # JAX key -> kcache Key of the entry handed to JAX
        self.flights: dict[str, tuple[Any, float]] = {}  # JAX key -> (_Flight, monotonic time of the miss)
        self.compile_time: dict[str, float] = {}  # JAX key -> XLA compile seconds, as JAX measured them

    def give_up(self, keys: list[str] | None = None) -> None:
        for k in list(self.flights) if keys is None else keys:
            held = self.flights.pop(k, None)
            if held is not None:
                held[0].abandon()

    def __del__(self) -> None:
        self.give_up()


def _forget_after_fork() -> None:
    global _lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_after_fork)

_thread_state = _integration.PerThread(_Thread).get  # what this thread is doing for JAX


# ---- keys ---------------------------------------------------------------------------------------

_host_cpu_memo = ""


def _host_cpu() -> str:
    """The host CPU XLA:CPU compiles for: machine, vendor, family, model and a digest of its feature flags."""
    global _host_cpu_memo
    if _host_cpu_memo:
        return _host_cpu_memo
    import hashlib
    import platform

    fields: dict[str, str] = {}
    wanted = ("vendor_id", "cpu family", "model", "flags", "CPU implementer", "CPU architecture", "CPU variant",
              "CPU part", "Features", "isa", "uarch")
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block
                    continue
                name, _, value = line.partition(":")
                name = name.strip()
                if name in wanted and name not in fields:
                    fields[name] = " ".join(value.split())
    except OSError:
        pass
    features = fields.pop("flags", "") or fields.pop("Features", "") or fields.pop("isa", "")
    ident = ",".join(f"{k}={v}" for k, v in sorted(fields.items()))
    digest = hashlib.sha256(" ".join(sorted(features.split())).encode()).hexdigest()[:16]
    _host_cpu_memo = f"{platform.machine()};{ident};features={digest}"
    return _host_cpu_memo


_kkeys: dict[tuple[str, str, str], Any] = {}  # (JAX key, platform, platform version) -> kcache Key


def _backend_of(backend: Any) -> tuple[str, str]:
    try:
        return str(backend.platform), str(backend.platform_version)
    except Exception:  # a backend JAX knows and we do not: key on what it says
        return str(getattr(backend, "platform", "unknown")), ""


def key_fields(jax_key: str, platform: str, platform_version: str) -> list[tuple[str, str]]:
    """kcache's key record for JAX's key ``jax_key`` on a backend (docs/jax.md, "Keys")."""
    s = _seams
    # No "kind" field: the entry under a key is an executable or a note about it (NOTE_KIND).
    fields = [("format", _KEY_FORMAT), ("jax_version", s.jax_version if s else ""),
              ("jaxlib_version", s.jaxlib_version if s else ""), ("backend", platform),
              ("platform_version", platform_version)]
    if platform == "cpu":
        fields.append(("host_cpu", _host_cpu()))
    fields.append(("jax_key", jax_key))
    return fields


def _kkey(jax_key: str, backend: Any) -> tuple[Any, list[tuple[str, str]] | None]:
    platform, version = _backend_of(backend)
    memo = (jax_key, platform, version)
    kkey = _kkeys.get(memo)
    if kkey is not None:
        return kkey, None
    fields = key_fields(jax_key, platform, version)
    if len(_kkeys) >= 65536:
        _kkeys.clear()
    kkey = _kkeys[memo] = _kcache._key_of_values(_DOMAIN, fields)
    return kkey, fields


def _labels(jax_key: str, backend: Any) -> dict[str, str]:
    platform, version = _backend_of(backend)
    module, _, _ = jax_key.rpartition("-")
    return {"jax.key": jax_key, "jax.module": module, "jax.backend": platform, "jax.platform_version": version}


# ---- notes: "compiled, not stored" ----------------------------------------------------------------


def _note_payload(reason: str, compile_s: float, min_s: float) -> bytes:
    import json

    return (_NOTE_MAGIC + "\n" + json.dumps({"reason": reason, "compile_seconds": round(compile_s, 6),
                                             "min_compile_time_secs": min_s}, sort_keys=True) + "\n").encode()


def _note_applies(artifact: Any) -> bool:
    """True when a note still holds here: this process would not store the compile either."""
    import json

    try:
        head, _, body = bytes(artifact.view).decode("utf-8").partition("\n")
        note = json.loads(body) if head == _NOTE_MAGIC else None
    except (UnicodeDecodeError, ValueError):
        note = None
    if not isinstance(note, dict):
        return False  # not a note we wrote: replace it
    if note.get("reason") == "host_callbacks":
        return True
    compile_s = note.get("compile_seconds")
    return isinstance(compile_s, (int, float)) and compile_s < _seams.min_compile_time()


# ---- the cache JAX calls ------------------------------------------------------------------------


class _Interface:
    """JAX's CacheInterface over kcache's store (mixed into JAX's class by _interface_class).

    ``get(key)``: the verified payload of the entry, or None. A miss inside
    JAX's read of an executable (get_executable_and_time) takes the key's
    single-flight lease, or waits for its holder and returns what it
    published; any other get (a peek) only looks. ``put(key, value)``:
    publishes the entry (through the lease this thread holds, then released).
    """

    _path: Any

    def __init__(self, cache_dir: str) -> None:
        import pathlib

        self._path = pathlib.Path(cache_dir)  # JAX logs it
        self._backend: Any = None  # the last backend seen, for a peek outside a compile

    def get(self, key: str) -> bytes | memoryview | None:
        t = _thread_state()
        backend = t.backend if t.backend is not None else self._backend
        store = _the_store()
        if backend is None or store is None or not isinstance(key, str):
            return None
        reading = t.reading == key
        if reading and key in t.flights:
            return None  # this thread compiles it
        kkey, _ = _kkey(key, backend)
        try:
            got = store.get(kkey)
            if got is not None:
                answered, payload = self._serve(store, got, key, t, reading, False)
                if answered:
                    return payload
            if not reading:
                return None
            # The flight counts this request (served after a wait, compiled, uncached, failed).
            flight = _kcache._Flight(store, kkey, _compile_timeout, _DOMAIN)
            got = flight.wait()  # the GIL is released while it waits
        except Error as e:
            _count("errors")
            _warn_once("get", f"cannot read the cache ({e}); compiling without it")
            if reading:
                _count_request(store, _DOMAIN, "uncached")
            return None
        if got is not None:
            return self._serve(store, got, key, t, reading, True)[1]
        t.flights[key] = (flight, time.monotonic())
        return None

    def _serve(self, store: Store, got: Any, key: str, t: _Thread, reading: bool,
               counted: bool) -> tuple[bool, bytes | memoryview | None]:
        """(True, the payload to hand JAX), (True, None): compile here without the lease (a note
        says so), or (False, None): a miss, take the lease. ``counted``: the request is counted
        already (by the flight that returned ``got``; a note that a holder published while this
        one waited counts there as served)."""
        after_wait = got.outcome == "hit_after_wait"
        if got.kind == KIND:
            if reading:
                t.served[key] = got.key
                _count("hits_after_wait" if after_wait else "hits")
                _count("compile_seconds_saved", got.passport.get("compile_duration_us", 0) / 1e6)
                if not counted:
                    _count_request(store, _DOMAIN, "served", got.served_from, got.compile_duration_us)
            # A large payload is handed over as a read-only memoryview of the verified bytes,
            # never copied (JAX decompresses from any bytes-like object).
            payload: bytes | memoryview = got.view if len(got) >= _VIEW_MIN_BYTES else got.payload
            return True, payload
        if got.kind == NOTE_KIND and _note_applies(got):
            if reading:
                _count("skipped_by_note")
                if not counted:
                    _count_request(store, _DOMAIN, "uncached")
            return True, None
        if got.kind != NOTE_KIND:  # only a forger puts another kind under our key
            _count("bad_entries")
            _warn_once("bad-kind", f"entry {got.key} holds a {got.kind!r}, not a JAX executable: removed, compiling")
        try:
            store.remove(got.key, remote=True)  # an outdated note (the threshold was lowered), or junk
        except Error:
            pass
        return False, None

    def put(self, key: str, value: bytes) -> None:
        t = _thread_state()
        backend = t.backend if t.backend is not None else self._backend
        store = _the_store()
        held = t.flights.pop(key, None)
        if backend is None or store is None:
            if held is not None:
                held[0].abandon(uncached=True)
            return
        kkey, fields = _kkey(key, backend)
        if fields is None:
            fields = key_fields(key, *_backend_of(backend))
        seconds = t.compile_time.get(key)
        if seconds is None:
            seconds = time.monotonic() - held[1] if held is not None else 0.0
        s = _seams
        try:
            artifact = _kcache._record_artifact(_DOMAIN, fields, KIND, value, "jax", s.jax_version, "",
                                                _labels(key, backend), max(1, int(seconds * 1e6)))
            if held is not None:
                outcome = held[0].deliver(store, artifact)  # the flight counts the request
            else:
                outcome = store.put(artifact)
                if outcome == "already_present":
                    self._replace_note(store, artifact)
                _count_request(store, _DOMAIN, "compiled", None, max(1, int(seconds * 1e6)))
        except (Error, ValueError, TypeError) as e:
            if held is not None:
                held[0].abandon(uncached=True)
            else:
                _count_request(store, _DOMAIN, "uncached", None, max(1, int(seconds * 1e6)))
            _count("errors")
            _warn_once("put", f"cannot store JAX's executable ({e}); it is compiled, not cached")
            return
        _count("errors" if outcome == "compiled_only" else "compiled")  # compiled_only: the store said why

    @staticmethod
    def _replace_note(store: Store, artifact: Any) -> None:
        # A note under the key (another host's compile was faster than the
        # threshold, this one's was not): the executable takes its place.
        present = store.get(artifact.key)
        if present is not None and present.kind == NOTE_KIND:
            store.remove(artifact.key, remote=True)
            store.put(artifact)


_interface_cls: Any = None


def _interface_class() -> Any:
    global _interface_cls
    if _interface_cls is None:
        import importlib

        CacheInterface = importlib.import_module("jax._src.compilation_cache_interface").CacheInterface
        _interface_cls = type("KCacheInterface", (_Interface, CacheInterface), {"__module__": __name__,
                                                                                 "__doc__": _Interface.__doc__})
    return _interface_cls


# ---- what wraps JAX's internals (kcache._jax_seams) ---------------------------------------------


def _on_unloadable(kkey: Any, jax_key: str, e: BaseException) -> None:
    """JAX could not load an entry that verified: remove it (here and on the team's remote), warn once."""
    _count("bad_entries")
    _warn_once("unloadable", f"JAX could not load cache entry {kkey} for {jax_key!r} ({type(e).__name__}: {e}); "
               "it was removed and the function is compiled again")
    store = _the_store()
    if store is not None:
        try:
            store.remove(kkey, remote=True)
        except Error:
            pass


def _not_stored(jax_key: str, reason: str, compile_s: float) -> None:
    """The compile of ``jax_key`` ends without a put: a note for the waiters (when it is why), the lease given up."""
    t = _thread_state()
    held = t.flights.pop(jax_key, None)
    if held is None:
        return
    _count("not_stored")
    store = _the_store()
    try:
        if reason and store is not None and t.backend is not None:
            kkey, fields = _kkey(jax_key, t.backend)
            if fields is None:
                fields = key_fields(jax_key, *_backend_of(t.backend))
            note = _kcache._record_artifact(_DOMAIN, fields, NOTE_KIND,
                                            _note_payload(reason, compile_s, _seams.min_compile_time()), "jax",
                                            _seams.jax_version, "", _labels(jax_key, t.backend))
            # Published before the lease goes, so the waiters find it and compile at once.
            store.put(note)
            store.flush()
    except Error as e:
        _warn_once("note", f"cannot store a note for {jax_key!r} ({e})")
    finally:
        held[0].abandon(uncached=True)  # compiled, not stored: an uncached request


# ---- install ------------------------------------------------------------------------------------


def why_unsupported() -> str | None:
    """Why kcache.jax cannot run here (jax missing, its internals moved), or None when it can. Imports jax."""
    from . import _jax_seams

    got = _jax_seams.find()
    return got if isinstance(got, str) else None


def installed() -> bool:
    """True while kcache is JAX's persistent compilation cache in this process."""
    s = _seams
    return s is not None and s.active()


def install(*, store: Store | None = None, compile_timeout: float = 3600.0,
            min_compile_time_secs: float | None = None) -> bool:
    """Make kcache JAX's persistent compilation cache in this process (imports jax); True when it is.

    ``store``: the kcache store (default: ``kcache.default_store()``).
    ``compile_timeout``: the longest one compile holds its key before the
    processes waiting for it compile themselves (a hung compile).
    ``min_compile_time_secs``: sets ``jax_persistent_cache_min_compile_time_secs``
    (None: keep JAX's, 1 s unless set); 0 stores every compile.

    Sets ``KCACHE_JAX=1`` in the environment, so that the processes this one
    starts turn kcache.jax on too. Never raises for the environment: when jax
    is missing, its internals are not the ones kcache.jax knows, or the cache
    cannot be opened, it warns once, returns False, and JAX runs as without
    kcache. Idempotent; ``uninstall()`` undoes it.
    """
    global _store, _compile_timeout, _seams
    if not compile_timeout > 0:
        raise ValueError(f"compile_timeout must be > 0 seconds, got {compile_timeout!r}")
    if min_compile_time_secs is not None and not min_compile_time_secs >= 0:
        raise ValueError(f"min_compile_time_secs must be >= 0 seconds, got {min_compile_time_secs!r}")
    from . import _jax_seams

    found = _jax_seams.find()
    if isinstance(found, str):
        _warn_once("unsupported", f"{found}; JAX runs without kcache")
        return False
    if found.untested:
        _warn_once("untested", f"jax {found.jax_version} is outside the versions kcache.jax was tested with "
                   f"({TESTED_JAX[0]} to {TESTED_JAX[1]}); its internals look the same, so kcache.jax is on")
    os.environ["KCACHE_JAX"] = "1"
    _store = store
    _compile_timeout = float(compile_timeout)
    s = _the_store()
    if s is None:
        return False  # kcache.default_store() said why
    _kkeys.clear()
    if _seams is not None and _seams is not found:
        _seams.restore()
    _seams = found
    found.apply(_interface_class()(s.config.cache_dir))
    if min_compile_time_secs is not None:
        found.set_min_compile_time(float(min_compile_time_secs))
    return True


def uninstall() -> None:
    """Give JAX back the cache it had before install() (none, or its own directory)."""
    global _seams, _store
    if _seams is not None:
        _seams.restore()
    _seams = None
    _store = None
    _kkeys.clear()
    _thread_state().give_up()
    if os.environ.get("KCACHE_JAX") == "1":
        del os.environ["KCACHE_JAX"]
