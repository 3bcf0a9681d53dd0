"""kcache.triton: kcache as Triton's kernel cache (docs/triton.md).

One line turns it on::

    import kcache.triton; kcache.triton.install()

or, for a program you cannot edit, the environment alone::

    TRITON_CACHE_MANAGER=kcache.triton:KCacheManager

Then every kernel Triton compiles is cached in kcache's store (the same C++
library and on-disk cache as every other kcache entry, its size cap, its
remote tier):

- **A group is one entry.** All files of a kernel (IR stages, cubin, metadata
  JSON) go into one entry of kind ``triton-group``, whose payload is a
  deterministic container of (file name, bytes) pairs (``pack_group``) and
  whose passport carries Triton's version, the target, the kernel name and
  Triton's cache key. It is published with the store's one commit point and
  verified (size, SHA-256, key record) on every read: a reader gets one
  writer's whole group or a miss, never a mix or a part; a damaged entry is a
  miss, removed, and the kernel is compiled again. A file Triton caches on
  its own (the launcher ``.so`` of ``triton.runtime.build``) is an entry of
  kind ``triton-file`` in the same container.
- **One compile per key.** A miss in ``get_group`` takes the key's
  single-flight lease (threads, processes, and with a Redis remote, hosts)
  or waits for its holder and returns the group the holder published;
  ``put_group`` publishes and releases. A holder that dies (SIGKILL) lets a
  waiter take over at once; one whose compile raised or that never
  publishes gives the key up when Triton drops the manager, or after
  ``compile_timeout`` seconds at most.
- **Files on disk.** Triton wants paths: a verified group is written into
  this process's own directory ``<root>/<domain>-<pid>-<start>/`` (0700; the
  root is a private directory on a memory filesystem when there is one, else
  ``<cache_dir>/v1/triton/run``; a compile's staged files go there too, single
  files (a launcher ``.so``) always to the latter), valid for the life of the
  process, removed at exit, and swept
  by the next process that starts when its owner died without removing it.
  These copies are not entries and do not count under the cap.
- **Warm starts.** ``install()`` also replaces ``triton_key()`` by one that
  remembers its value across processes, valid while every file it hashed is
  unchanged (kcache._triton_key).

Dump and override modes (``TRITON_KERNEL_DUMP``, ``TRITON_KERNEL_OVERRIDE``)
keep Triton's own file cache manager. When kcache's cache cannot be opened,
Triton's own cache is used (after one warning from ``kcache.default_store``).

Importing this module does not import Triton: ``KCacheManager`` and
``install()`` do, when first used.
"""

from __future__ import annotations

import _thread
import os
import struct

from . import Error, _count_request, _integration, _kcache
from . import _triton_files as _files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from . import Store

__all__ = ["GROUP_KIND", "FILE_KIND", "KCacheManager", "install", "uninstall", "pack_group", "unpack_group"]

GROUP_KIND = "triton-group"
FILE_KIND = "triton-file"
_DOMAIN = "triton"
_KEY_FORMAT = "1"

# Group container, format 1 (docs/triton.md, "What is stored"):
#   group := MAGIC u32le(count) file{count}
#   file  := u32le(len(name)) name u64le(len(data)) data
# names sorted (bytewise), unique, 1..255 bytes of UTF-8 without "/" or NUL and
# not "." or ".."; nothing after the last file.
_MAGIC = b"KCACHE-TRITON-GROUP\x001\n"
_MAX_FILES = 4096


def _check_name(name: str) -> bytes:
    raw = name.encode("utf-8")
    if not raw or len(raw) > 255 or b"/" in raw or b"\0" in raw or name in (".", ".."):
        raise ValueError(f"a Triton cache file name must be 1-255 bytes without '/' or NUL, not {name!r}")
    return raw


def pack_group(files: Mapping[str, bytes]) -> bytes:
    """The container of ``files`` (name -> bytes): the same bytes for the same files, whatever their order."""
    if len(files) > _MAX_FILES:
        raise ValueError(f"a Triton group holds at most {_MAX_FILES} files, not {len(files)}")
    items = sorted((_check_name(n), bytes(d)) for n, d in files.items())
    out = [_MAGIC, struct.pack("<I", len(items))]
    for raw, data in items:
        out += [struct.pack("<I", len(raw)), raw, struct.pack("<Q", len(data)), data]
    return b"".join(out)


def unpack_group(payload: bytes | memoryview) -> dict[str, bytes]:
    """The files of a container; raises ValueError naming what is wrong when it is not one."""
    view = memoryview(payload)
    if bytes(view[: len(_MAGIC)]) != _MAGIC:
        raise ValueError("not a kcache Triton group (bad magic)")
    pos = len(_MAGIC)

    def take(n: int) -> memoryview:
        nonlocal pos
        if n > len(view) - pos:
            raise ValueError("kcache Triton group is truncated")
        part = view[pos : pos + n]
        pos += n
        return part

    (count,) = struct.unpack("<I", take(4))
    if count > _MAX_FILES:
        raise ValueError(f"kcache Triton group claims {count} files")
    files: dict[str, bytes] = {}
    last = b""
    for _ in range(count):
        (nlen,) = struct.unpack("<I", take(4))
        raw = bytes(take(nlen))
        (dlen,) = struct.unpack("<Q", take(8))
        data = bytes(take(dlen))
        name = raw.decode("utf-8", errors="strict")
        if _check_name(name) != raw or (files and raw <= last):
            raise ValueError("kcache Triton group names are not sorted and unique")
        files[name] = data
        last = raw
    if pos != len(view):
        raise ValueError("kcache Triton group has bytes after its last file")
    return files


# ---- settings (install) -------------------------------------------------------------------------

_lock = _thread.allocate_lock()
_store: Store | None = None  # install(store=...); None: kcache.default_store()
# Called with (Triton's key, the group's file name, its files: name -> path) for every group a
# manager serves or publishes; set by kcache.torch (docs/torch.md, "Triton kernels under Inductor").
on_group: Callable[[str, str, Mapping[str, str]], None] | None = None
_compile_timeout = 600.0
_warned: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    _integration.warn_once(_warned, "kcache.triton", what, message)


def _the_store() -> Store | None:
    return _integration.live_store(_store)


# ---- the keys a thread holds ----------------------------------------------------------------------


class _Held:
    """The single-flight keys one thread holds (its misses not yet published).

    Triton compiles one kernel at a time per thread, so a thread's new miss
    gives up the keys it still holds: their compile raised. So do a thread's
    end (its thread-local storage is dropped) and the manager's collection.
    """

    def __init__(self) -> None:
        self.flights: list[Any] = []

    def give_up(self) -> None:
        for flight in self.flights:
            flight.abandon()
        self.flights.clear()

    def __del__(self) -> None:
        self.give_up()


def _forget_after_fork() -> None:
    global _lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_after_fork)

_thread_held = _integration.PerThread(_Held).get  # the single-flight keys this thread holds


# ---- the cache manager --------------------------------------------------------------------------


def _cuda_arch(target: Any) -> str:
    # What Triton's NVIDIA backend compiles for (sm_arch_from_capability).
    if isinstance(target, dict) and target.get("backend") == "cuda" and isinstance(target.get("arch"), int):
        arch = target["arch"]
        return f"sm_{arch}{'a' if arch >= 90 else ''}"
    if isinstance(target, dict):
        return str(target.get("arch", ""))
    return ""


_last_dir: tuple[Store, str] | None = None  # (store, its cache directory), of the last manager made
_kkeys: dict[tuple[str, str, str], _kcache.Key] = {}  # (Triton's key, kind, name) -> kcache key


class _Manager:
    """The behaviour of KCacheManager (mixed into Triton's CacheManager by _manager_class)."""

    _fallback: Any
    _triton_version: str = ""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        self._fallback = None
        self._staged: dict[str, tuple[str, bytes]] = {}  # name -> (path, bytes), put() by this manager
        self._stage_dir = ""
        self._group: dict[str, str] | None = None  # a group this manager read
        self._grouped = False  # get_group was called: puts wait for put_group
        self._flights: dict[str, Any] = {}  # kcache key hex -> _Flight this manager holds
        store = None if (override or dump) else _the_store()
        if store is None:
            from triton.runtime.cache import FileCacheManager  # type: ignore[import-untyped, import-not-found, unused-ignore]

            self._fallback = FileCacheManager(key, override=override, dump=dump)
            return
        self._s = store
        global _last_dir
        last = _last_dir  # Triton makes a manager per compile: the store's settings are asked once
        if last is None or last[0] is not store:
            _last_dir = last = (store, store.config.cache_dir)
        self._cache_dir = last[1]

    # -- keys and entries

    def _kkey(self, kind: str, name: str) -> _kcache.Key:
        memo = (self.key, kind, name)
        kkey = _kkeys.get(memo)
        if kkey is None:
            if len(_kkeys) >= 65536:
                _kkeys.clear()
            kkey = _kkeys[memo] = _kcache._key_of_values(_DOMAIN, self._fields(kind, name))
        return kkey

    def _fields(self, kind: str, name: str) -> list[tuple[str, str]]:
        return [("kind", kind), ("format", _KEY_FORMAT), ("triton_version", self._triton_version),
                ("triton_key", self.key), ("group" if kind == GROUP_KIND else "file", name)]

    def _files_of(self, artifact: Any, kind: str, name: str) -> dict[str, str] | None:
        """The materialized files of a verified entry, or None (removed, warned) when it is not a group of ``name``."""
        try:
            if artifact.kind != kind:
                raise ValueError(f"kind {artifact.kind}")
            files = unpack_group(artifact.view)
            missing = _files.missing_for_triton(name, files) if kind == GROUP_KIND else (
                None if name in files else f"it holds no {name}")
            if missing is not None:
                raise ValueError(missing)
        except ValueError as e:
            _warn_once("bad-group", f"entry {artifact.key} is not a usable Triton group ({e}): compiling again")
            try:
                self._s.remove(artifact.key)
            except Error:
                pass
            return None
        try:
            run = _files.run_memory if kind == GROUP_KIND else _files.run
            return _files.materialize(self._cache_dir, artifact.key.hex, artifact.passport["payload"]["sha256"], files, run)
        except OSError as e:
            _warn_once("materialize", f"cannot write Triton's files under {self._cache_dir}: {e}; compiling")
            return None

    def _lookup(self, kind: str, name: str, take_flight: bool) -> dict[str, str] | None:
        # A lookup that may take a flight is one request (`kcache stats`, route "triton"): a hit is
        # counted here, a miss by its flight (served after a wait, compiled, or failed).
        kkey = self._kkey(kind, name)
        known = _files.known(kkey.hex)
        if known is not None and name in known:
            if take_flight:
                _count_request(self._s, _DOMAIN, "served", "memory")
            return known
        try:
            got = self._s.get(kkey)
            if got is not None:
                files = self._files_of(got, kind, name)
                if files is not None:
                    if take_flight:
                        _count_request(self._s, _DOMAIN, "served", got.served_from, got.compile_duration_us)
                    return files
            if not take_flight:
                return None
            held = _thread_held()
            held.give_up()  # this thread's earlier misses that never published: their compile raised
            flight = _kcache._Flight(self._s, kkey, _compile_timeout, _DOMAIN)
            got = flight.wait()
        except Error as e:
            _warn_once("lookup", f"lookup failed ({e}); compiling without the cache")
            return None
        if got is not None:
            return self._files_of(got, kind, name)
        self._flights[kkey.hex] = flight  # given up when this manager is dropped, at the latest
        held.flights.append(flight)
        return None

    def _publish(self, kind: str, name: str, files: dict[str, bytes]) -> None:
        kkey = self._kkey(kind, name)
        labels = {"triton.key": self.key, "triton." + ("group" if kind == GROUP_KIND else "file"): name,
                  "triton.files": ",".join(sorted(files))}
        arch = ""
        meta = files.get(name) if kind == GROUP_KIND else None
        if meta is not None:
            try:
                import json

                m = json.loads(meta)
            except ValueError:
                m = None
            if isinstance(m, dict):  # labels only: the payload holds the metadata as Triton wrote it
                labels["triton.kernel"] = str(m.get("name", ""))
                t = m.get("target")
                if isinstance(t, dict):
                    labels["triton.target"] = f"{t.get('backend')}:{t.get('arch')}:{t.get('warp_size')}"
                arch = _cuda_arch(t)
        flight = self._flights.pop(kkey.hex, None)
        missing = _files.missing_for_triton(name, files) if kind == GROUP_KIND else None
        if missing is not None:  # every process that hit it would fail to load it
            if flight is not None:
                flight.abandon()
            _warn_once("incomplete", f"Triton's group {name} is not cached: {missing}")
            return
        try:
            artifact = _kcache._record_artifact(_DOMAIN, self._fields(kind, name), kind, pack_group(files), "triton",
                                                self._triton_version, arch, labels)
            if flight is not None:
                flight.deliver(self._s, artifact)  # counted by the flight
            else:
                self._s.put(artifact)
                _count_request(self._s, _DOMAIN, "compiled")
        except (Error, ValueError, OSError) as e:
            if flight is not None:
                flight.abandon(uncached=True)  # compiled, not cached: counted so by the flight
            else:
                _count_request(self._s, _DOMAIN, "uncached")
            _warn_once("put", f"cannot store Triton's {name} ({e}); it is compiled, not cached")
            return
        staged = {n: self._staged[n][0] for n in files if n in self._staged and self._staged[n][1] == files[n]}
        if len(staged) == len(files):
            try:
                _files.remember(kkey.hex, _files.signatures(staged))
            except OSError:
                pass  # removed underneath: the next lookup reads the entry

    def _stage(self, name: str, data: bytes) -> str:
        # Triton needs a path it can read back. A compile's files go to this process's
        # private memory directory (a launcher .so, cached alone, to the cache directory:
        # dlopen refuses a noexec /dev/shm), so that nothing done to the shared cache
        # directory (clear, prune, a cleaner) can take them away mid-compile. A directory
        # that cannot take them (full, removed underneath) must not fail the compile: a
        # new one does, else a private temporary directory (removed at exit).
        if name in self._staged:
            try:
                os.unlink(self._staged[name][0])
            except OSError:
                pass
        path = ""
        try:
            if self._stage_dir:
                path = os.path.join(self._stage_dir, name)
                try:
                    _files.write_file(path, data)
                except OSError:
                    path = ""
            if not path:
                path = _files.write_new(self._cache_dir, {name: data}, self._run(), "s")[name]
                self._stage_dir = os.path.dirname(path)
        except OSError as e:
            import tempfile

            _warn_once("stage", f"cannot write Triton's files under {self._cache_dir} ({e}); using a temporary directory")
            self._stage_dir = tempfile.mkdtemp(prefix="kcache-triton-")
            _files.left.append(self._stage_dir)
            path = os.path.join(self._stage_dir, name)
            _files.write_file(path, data)
        self._staged[name] = (path, data)
        return path

    def _run(self) -> Any:
        return _files.run_memory if self._grouped else _files.run

    def _restage_missing(self, group: dict[str, str]) -> None:
        # Triton builds its CompiledKernel from the very dict put_group got: a staged file
        # removed underneath since put() (a cleaner) is written again and the dict points to it.
        missing = {n: self._staged[n][1] for n, p in group.items()
                   if n in self._staged and self._staged[n][0] == p and not os.path.exists(p)}
        if not missing:
            return
        try:
            paths = _files.write_new(self._cache_dir, missing, self._run(), "s")
        except OSError:
            return  # Triton reports the missing file, as it would without kcache
        for n, p in paths.items():
            group[n] = p
            self._staged[n] = (p, missing[n])

    # -- what Triton calls

    def get_group(self, filename: str) -> dict[str, str] | None:
        if self._fallback is not None:
            return self._fallback.get_group(filename)  # type: ignore[no-any-return]
        self._grouped = True
        self._group = self._lookup(GROUP_KIND, filename, take_flight=True)
        if self._group is None:
            return None
        self._tell(filename, self._group)
        return dict(self._group)

    def put_group(self, filename: str, group: dict[str, str]) -> str | None:
        if self._fallback is not None:
            return self._fallback.put_group(filename, group)  # type: ignore[no-any-return]
        files: dict[str, bytes] = {}
        try:
            for name, path in group.items():
                staged = self._staged.get(name)
                if staged is not None and staged[0] == path:
                    files[name] = staged[1]
                else:
                    with open(path, "rb") as f:
                        files[name] = f.read()
        except OSError as e:
            _warn_once("put", f"cannot read Triton's file {e.filename} ({e.strerror}); not cached")
            for flight in self._flights.values():
                flight.abandon(uncached=True)
            return group.get(filename)
        self._restage_missing(group)
        self._publish(GROUP_KIND, filename, files)
        self._tell(filename, group)
        return group.get(filename)

    def _tell(self, filename: str, group: Mapping[str, str]) -> None:
        hook = on_group
        if hook is not None:
            try:
                hook(self.key, filename, group)
            except Exception as e:  # a hook never fails a compile
                _warn_once("on-group", f"the group hook failed ({e})")

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        if self._fallback is not None:
            return self._fallback.put(data, filename, binary=binary)  # type: ignore[no-any-return]
        raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
        path = self._stage(filename, raw)
        if not self._grouped:  # a file Triton caches on its own (triton.runtime.build)
            self._publish(FILE_KIND, filename, {filename: raw})
        return path

    def get_file(self, filename: str) -> str | None:
        if self._fallback is not None:
            return self._fallback.get_file(filename)  # type: ignore[no-any-return]
        staged = self._staged.get(filename)
        if staged is not None:
            return staged[0]
        if self._group is not None and filename in self._group:
            return self._group[filename]
        if self._grouped:
            return None
        files = self._lookup(FILE_KIND, filename, take_flight=True)
        return None if files is None else files[filename]

    def has_file(self, filename: str) -> bool:
        if self._fallback is not None:
            return bool(self._fallback.has_file(filename))
        if filename in self._staged or (self._group is not None and filename in self._group):
            return True
        if self._grouped:
            return False
        return self._lookup(FILE_KIND, filename, take_flight=False) is not None

    def __del__(self) -> None:
        for flight in getattr(self, "_flights", {}).values():
            flight.abandon()


_manager_cls: Any = None


def _manager_class() -> Any:
    global _manager_cls
    if _manager_cls is None:
        import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from triton.runtime.cache import CacheManager  # type: ignore[import-untyped, import-not-found, unused-ignore]

        cls = type("KCacheManager", (_Manager, CacheManager), {"__module__": __name__, "__doc__": _MANAGER_DOC})
        setattr(cls, "_triton_version", str(triton.__version__))
        _manager_cls = cls
    return _manager_cls


_MANAGER_DOC = """Triton's CacheManager over kcache's store (module docstring of kcache.triton).

Triton makes one per compile: ``get_group`` (a hit: the group's files; a miss:
this manager holds the key's single-flight lease), ``put`` per file (staged),
``put_group`` (one entry, published, lease released). ``get_file`` / ``put``
without a group cache a single file (the launcher). Dump and override
managers are Triton's FileCacheManager.
"""


def __getattr__(name: str) -> Any:
    if name == "KCacheManager":
        return _manager_class()
    raise AttributeError(f"module 'kcache.triton' has no attribute '{name}'")


# ---- install ------------------------------------------------------------------------------------

_original_key: Any = None


def install(*, store: Store | None = None, compile_timeout: float = 600.0, memoize_key: bool = True) -> None:
    """Make kcache Triton's cache in this process (imports Triton).

    Sets ``triton.knobs.cache.manager_class`` to ``KCacheManager``. ``store``:
    the kcache store to use (default: ``kcache.default_store()``);
    ``compile_timeout``: the longest a compile holds its key before waiters
    compile themselves; ``memoize_key``: remember ``triton_key()`` across
    processes (kcache._triton_key). Idempotent; ``uninstall()`` undoes it.
    """
    global _store, _compile_timeout, _last_dir
    if not compile_timeout > 0:
        raise ValueError(f"compile_timeout must be > 0 seconds, got {compile_timeout!r}")
    from triton import knobs  # type: ignore[import-untyped, import-not-found, unused-ignore]

    _store = store
    _last_dir = None
    _compile_timeout = float(compile_timeout)
    _files.forget()  # what this process served was another store's
    knobs.cache.manager_class = _manager_class()
    if memoize_key:
        _patch_triton_key()


def uninstall() -> None:
    """Give Triton its own cache manager and ``triton_key()`` back."""
    global _store, _last_dir
    from triton import knobs  # type: ignore[import-untyped, import-not-found, unused-ignore]

    knobs.cache.manager_class = None
    _store = _last_dir = None
    _files.forget()
    if _original_key is not None:
        _set_triton_key(_original_key)
    import sys

    from . import _triton_key

    for name in ("triton.knobs", "triton.backends.nvidia.compiler"):
        mod = sys.modules.get(name)
        stand_in = getattr(mod, "subprocess", None)
        if isinstance(stand_in, _triton_key.ToolVersions):
            setattr(mod, "subprocess", stand_in._real)


def _set_triton_key(fn: Any) -> None:
    import sys

    for mod_name, mod in list(sys.modules.items()):
        if (mod_name == "triton" or mod_name.startswith("triton.")) and mod is not None and "triton_key" in getattr(mod, "__dict__", {}):
            current = mod.__dict__["triton_key"]
            if current is _original_key or getattr(current, "_kcache_memo", False):
                setattr(mod, "triton_key", fn)


_memo_key: Any = None  # the one replacement of this process: its value is kept across install()s


def _patch_triton_key() -> None:
    global _original_key, _memo_key
    import functools

    import triton.runtime.cache as tc  # type: ignore[import-untyped, import-not-found, unused-ignore]

    if getattr(tc.triton_key, "_kcache_memo", False):
        return
    if _memo_key is None:
        _original_key = tc.triton_key
        inner = getattr(_original_key, "__wrapped__", _original_key)

        @functools.lru_cache(maxsize=None)  # as Triton's own: one value per process
        def triton_key() -> str:
            from . import _triton_key

            s = _the_store()
            if s is None:
                return str(inner())
            return _triton_key.memoized(inner, tc, _triton_key.memo_path(s.config.cache_dir, tc))[0]

        triton_key._kcache_memo = True  # type: ignore[attr-defined]
        _memo_key = triton_key
    _set_triton_key(_memo_key)
    _patch_tool_versions()


def _patch_tool_versions() -> None:
    # `ptxas --version`, asked twice by every new process (kcache._triton_key.ToolVersions).
    import sys

    from . import _triton_key

    s = _the_store()
    if s is None:
        return
    for name in ("triton.knobs", "triton.backends.nvidia.compiler"):
        mod = sys.modules.get(name)
        real = getattr(mod, "subprocess", None)
        if mod is not None and real is not None and not isinstance(real, _triton_key.ToolVersions):
            setattr(mod, "subprocess", _triton_key.ToolVersions(real, _triton_key.tools_path(s.config.cache_dir)))
