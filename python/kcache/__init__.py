"""kcache: compile GPU code once, per process, per machine, per team.

The Python face of kcache's C++ library (the same library the ``kcache``
command uses): verified stores, NVRTC / nvJitLink / NVVM compiles through the
cache with complete keys, plans, and a drop-in cache for cuda.core
(``kcache.cuda_core``). See docs/python.md.

Importing kcache loads no CUDA library and does not import cuda.core: the
toolkit is loaded by the first compile that misses.
"""

from __future__ import annotations

# Only cheap modules at import time (no typing, no threading): `import kcache`
# stays within a few milliseconds.
import _thread
import atexit
import os as _os
import weakref
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence

from . import _kcache
from ._errors import (
    BundleRefused,
    CacheError,
    CompileError,
    ConfigError,
    CorruptEntry,
    Error,
    InternalError,
    InvalidArgument,
    NotFound,
    ToolkitNotFound,
    Unsupported,
    WorkerCrashed,
)
from ._kcache import Artifact, Config, Entry, Key, Store, setting_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Any, NamedTuple

    from . import bundle, cuda_core, onnx, plan

# The one version of kcache (project(kcache VERSION ...) in CMakeLists.txt), as
# the wheel, `kcache --version` and the CMake package have it.
__version__: str = _kcache.__version__

__all__ = [
    "Artifact", "BundleRefused", "CacheError", "CompileError", "Config", "ConfigError", "CorruptEntry", "Entry", "Error",
    "FieldDiff", "InternalError", "InvalidArgument", "Key", "NotFound", "Store", "ToolkitNotFound",
    "Unsupported", "WorkerCrashed", "compile", "compile_key", "cuda_core", "default_store", "link",
    "bundle", "nvvm_compile", "onnx", "open_store", "plan", "record_request", "setting_names", "why_miss",
]

_open_stores: weakref.WeakSet[Store] = weakref.WeakSet()
_default_lock = _thread.allocate_lock()
_default: Store | None = None
_default_error: Error | None = None
_forked = False


def open_store(config: Config | None = None) -> Store:
    """Open the stores ``config`` describes (default: ``Config.load()``).

    A memory tier in front of the on-disk cache; puts are published by a
    background thread. Close it (``with`` or ``close()``) to wait for them;
    stores still open at interpreter exit are closed then.

    Raises ConfigError for bad settings, CacheError when the cache cannot be opened.
    """
    store = _kcache.open_store(config)
    _open_stores.add(store)
    return store


def default_store() -> Store | None:
    """The process-wide store of ``Config.load()``, opened on first use.

    Returns None (after one warning) when the cache cannot be opened or a
    setting (in the environment or the config file) is bad: compiles then go
    on without it. ``Config.load()`` and ``open_store()`` raise instead.
    """
    global _default, _default_error
    with _default_lock:
        if _default is not None and not _default.closed:
            return _default
        if _default_error is not None:
            return None
        try:
            # In a forked child, puts are synchronous.
            config = Config.load(put="sync") if _forked else Config.load()
            _default = open_store(config)
        except Error as e:
            _default_error = e
            import warnings

            warnings.warn(f"kcache: compiling without the cache: {e}", RuntimeWarning, stacklevel=3)
            return None
        return _default


def _store_for(store: Store | None, cache: bool) -> Store | None:
    if not cache:
        return None
    return store if store is not None else default_store()


def compile(
    source: str | bytes | bytearray | memoryview,
    *,
    target: str = "cubin",
    arch: str = "sm_90",
    options: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
    headers: Mapping[str, str | bytes | bytearray | memoryview] | None = None,
    include_paths: Sequence[str | os.PathLike[str]] = (),
    name: str = "kernel.cu",
    source_path: str | os.PathLike[str] | None = None,
    store: Store | None = None,
    cache: bool = True,
) -> Artifact:
    """Compile CUDA C++ with NVRTC through the cache.

    ``target`` is "ptx", "cubin" or "ltoir"; ``arch`` e.g. "sm_90", "sm_90a"
    ("" to give --gpu-architecture in ``options``). ``headers`` are in-memory
    headers (name -> text); headers on disk found through ``include_paths`` (and
    the directory of ``source_path``) go into the key by content. The result's
    ``outcome`` says "hit", "hit_after_wait", "compiled" or "compiled_only";
    ``lowered_names`` maps each name expression to its mangled name, on hits
    too. One compile per key across threads and processes (single-flight).
    The GIL is released while it runs.

    ``store``: the store to use (default: ``default_store()``); ``cache=False``
    compiles without any store.

    Raises CompileError (with ``.log``), ToolkitNotFound, InvalidArgument.
    """
    return _kcache._compile(
        _store_for(store, cache), source, target, arch, options, name_expressions, headers,
        include_paths, name, None if source_path is None else str(source_path),
    )


def record_request(
    route: str,
    outcome: str,
    *,
    tier: str | None = None,
    compile_us: int = 0,
    store: Store | None = None,
) -> None:
    """Count one request that ended, for ``kcache stats`` (docs/python.md, "Counting requests").

    An integration calls this once per request it answers (a kernel, a graph,
    an executable), where it knows how the request ended:

    - ``route``: who asked, 1 to 16 characters of ``[a-z0-9._-]`` ("torch",
      "jax", "triton", "cuda-core", ...);
    - ``outcome``: "served" (from the cache; ``tier`` says where: "memory",
      "disk", "bundle" or "remote", e.g. an Artifact's ``served_from``),
      "compiled" (compiled and stored), "uncached" (compiled, not stored) or
      "failed" (the compile raised);
    - ``compile_us``: the compile's duration in microseconds: saved when
      served (an Artifact's ``passport["compile_duration_us"]``), spent otherwise.

    It is counted in the request counters of ``store``'s cache directory
    (default: ``default_store()``; none when no store can be opened), shared by
    every process, and in the summary of a ``kcache run`` the process runs
    under. ``kcache.compile``, ``link``, ``nvvm_compile``, ``cuda_core`` and
    ``kcache.triton`` count their requests themselves: do not count them again.

    Raises InvalidArgument for a bad route, outcome or tier (a served request
    needs its tier). Never raises for the counting itself.
    """
    if not isinstance(compile_us, int) or compile_us < 0:
        raise InvalidArgument(f"compile_us must be a whole number of microseconds >= 0, not {compile_us!r}",
                              "invalid_argument")
    s = store if store is not None else default_store()
    _kcache._record_request(s, route, outcome, tier, min(compile_us, 2**64 - 1))


def _count_request(store: Store, route: str, outcome: str, tier: str | None = None, compile_us: int = 0) -> None:
    """record_request() for kcache's own integrations (kcache.triton, kcache.jax, kcache.torch):
    arguments they spell right, a store given, and never raises (a closed store counts nothing)."""
    try:
        _kcache._record_request(store, route, outcome, tier, compile_us)
    except Error:
        pass


def compile_key(
    source: str | bytes | bytearray | memoryview,
    *,
    target: str = "cubin",
    arch: str = "sm_90",
    options: Sequence[str] = (),
    name_expressions: Sequence[str] = (),
    headers: Mapping[str, str | bytes | bytearray | memoryview] | None = None,
    include_paths: Sequence[str | os.PathLike[str]] = (),
    name: str = "kernel.cu",
    source_path: str | os.PathLike[str] | None = None,
) -> Key:
    """The key ``compile`` would use for these arguments, without compiling.

    Raises Unsupported when the request cannot be cached (a computed #include,
    a side-effect option), InvalidArgument for a bad request.
    """
    return _kcache._compile_key(
        source, target, arch, options, name_expressions, headers, include_paths, name,
        None if source_path is None else str(source_path),
    )


def _refuse_nul(text: str, what: str) -> None:
    if "\0" in text:
        raise InvalidArgument(f"{what} contains a NUL byte; pass it without one (a C string would end there)",
                              "invalid_argument")


def link(
    inputs: Iterable[Artifact | tuple[str, str, str | bytes | bytearray | memoryview]],
    *,
    arch: str = "sm_90",
    options: Sequence[str] = (),
    lto: bool = False,
    store: Store | None = None,
    cache: bool = True,
) -> Artifact:
    """Link PTX / LTO-IR / cubin / fatbin inputs to a cubin with nvJitLink, through the cache.

    Each input is an Artifact (its kind and payload) or a ``(name, kind, bytes)``
    tuple, kind one of "ptx", "ltoir", "cubin", "fatbin", "object", "library".
    ``lto=True`` adds -lto. Raises CompileError with nvJitLink's log.
    """
    items: list[tuple[str, str, str | bytes | bytearray | memoryview]] = []
    for item in inputs:
        if isinstance(item, Artifact):
            items.append((f"{item.key}.{item.kind}", item.kind, item.payload))
        else:
            items.append(item)
    _refuse_nul(arch, "arch")
    opts = ["-arch=" + arch] if arch else []
    if lto:
        opts.append("-lto")
    opts.extend(options)
    return _kcache._link(_store_for(store, cache), items, opts)


def nvvm_compile(
    ir: str | bytes | bytearray | memoryview,
    *,
    arch: str = "compute_90",
    options: Sequence[str] = (),
    modules: Iterable[tuple[str, str | bytes | bytearray | memoryview]] = (),
    name: str = "kernel.ll",
    store: Store | None = None,
    cache: bool = True,
) -> Artifact:
    """Compile NVVM IR (text or bitcode) to PTX with libNVVM, through the cache.

    ``modules`` are extra modules linked in (e.g. libdevice), each ``(name, bytes)``,
    in the key by content. Raises CompileError with libNVVM's log.
    """
    _refuse_nul(arch, "arch")
    opts = ["-arch=" + arch] if arch else []
    opts.extend(options)
    return _kcache._nvvm_compile(_store_for(store, cache), ir, name, list(modules), opts)


if TYPE_CHECKING:

    class FieldDiff(NamedTuple):
        """One key-record field that differs; ``left``/``right`` are None where absent."""

        name: str
        left: str | None
        right: str | None

else:
    FieldDiff = namedtuple("FieldDiff", ["name", "left", "right"])
    FieldDiff.__doc__ = "One key-record field that differs; ``left``/``right`` are None where absent."


def _passport_json(x: Artifact | Key | str | Mapping[str, Any], store: Store | None) -> str:
    if isinstance(x, Artifact):
        return x.passport_json
    if isinstance(x, Mapping):
        import json

        return json.dumps(dict(x))
    if isinstance(x, (Key, str)):
        s = store if store is not None else default_store()
        got = s.get(x) if s is not None else None
        if got is None:
            raise NotFound(f"the cache holds no entry {x}; pass an Artifact or a passport dict instead", "not_found")
        return got.passport_json
    raise TypeError(f"why_miss takes Artifacts, Keys, hex strs or passport dicts, not {type(x).__name__}")


def why_miss(
    a: Artifact | Key | str | Mapping[str, Any],
    b: Artifact | Key | str | Mapping[str, Any],
    *,
    store: Store | None = None,
) -> list[FieldDiff]:
    """The key-record fields that differ between two artifacts (empty: same key).

    Each of ``a`` and ``b`` is an Artifact, a passport dict, or a Key (or its
    hex) looked up in ``store`` (default: ``default_store()``), as
    ``kcache why-miss`` does.
    """
    return [FieldDiff(*d) for d in _kcache._why_miss(_passport_json(a, store), _passport_json(b, store))]


def __getattr__(name: str) -> Any:
    # kcache.plan and kcache.cuda_core are imported when first used, so that
    # `import kcache` stays small (and never imports cuda.core).
    if name in ("plan", "cuda_core", "onnx", "bundle"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'kcache' has no attribute '{name}'")


def _after_fork_in_child() -> None:
    # A forked child inherits the parent's stores but not their background
    # threads: forget them (a later default_store() opens a fresh one).
    global _default, _default_lock, _default_error
    for store in list(_open_stores):
        store._abandon()
    _open_stores.clear()
    _default = None
    _default_error = None
    _default_lock = _thread.allocate_lock()
    # multiprocessing ends forked workers with os._exit(), which skips atexit:
    # the default store of a forked child publishes each put before returning.
    global _forked
    _forked = True


_os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_open_stores() -> None:
    for store in list(_open_stores):
        try:
            store.close()
        except Error:
            pass
